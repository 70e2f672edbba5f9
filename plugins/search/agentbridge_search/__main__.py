from agentbridge_search.cli import main

raise SystemExit(main())
