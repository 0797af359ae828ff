from vsr.console import entry

entry()
