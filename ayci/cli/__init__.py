"""The command line: `python -m ayci run` measures a matrix on a model (the example ResNet-18 by
default) on the embedded default and prints the table; `python -m ayci --help` lists the rest.

One module per command or group (`run`, `plan`, `inspect`, `replay`, `cancel`, `traffic`,
`coldstart`, `profile`, `endpoint`, `loadtest`, `serve`), assembled by `app`; what they share
in `common` and `options`; the terminal in `console`; following a run in `follow`; the run's log
file in `runlog`. Tables are rendered in `report/` (`report.terminal`, `report.studies`).

Bad input (unknown hardware or optimizer, an empty matrix, a file that is not a model, a
memory size outside Lambda's range, an SLO that is not a positive number, an unknown price
region) is a clear error naming the field before any work starts. The CLI never changes the
process's environment: settings are passed explicitly.
"""

from ayci.cli.app import main, parser
from ayci.cli.common import warn_if_unconfined
from ayci.cli.console import UsageError

__all__ = ["UsageError", "main", "parser", "warn_if_unconfined"]
