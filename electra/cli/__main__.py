"""`python -m electra.cli` (what `torchrun -m electra.cli` runs): the `electra` command."""

from electra.cli.main import exit_with, main

exit_with(main())
