from asr.cli import main

raise SystemExit(main())
