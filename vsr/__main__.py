from vsr.cli import entry

entry()
