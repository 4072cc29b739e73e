"""The run report, outside every service: its columns, cell formats and recommendation kinds
(`table`), the recommendation itself (`recommendation`), and its renderings: text and HTML
email, JSON and CSV for the API (`render`), what the CLI prints (`terminal`: the results table,
a plan, a signature; `studies`: traffic, cold-start levers, load tests; `profiles`)."""

from report.recommendation import recommend
from report.render import email_message, results_csv, results_document
from report.table import COLUMNS, RECOMMENDATION_KINDS, format_cell, summary_rows
from report.terminal import print_report

__all__ = [
    "COLUMNS",
    "RECOMMENDATION_KINDS",
    "email_message",
    "format_cell",
    "print_report",
    "recommend",
    "results_csv",
    "results_document",
    "summary_rows",
]
