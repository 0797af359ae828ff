from vsr.cli import main

raise SystemExit(main())
