"""Operating the product on this machine: the local stack (``stack``), ``manage.py demo``, the load tests
(``loadtest``, ``loadtest_intake``) and the fault drills (``faultdrill``). Run by a developer or CI, never in
production: the production image leaves this package out (settings install it as an app only where it is)."""
