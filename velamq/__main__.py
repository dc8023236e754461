from velamq.cli._main import main

raise SystemExit(main())
