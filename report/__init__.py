"""The run report, outside every service: its columns, cell formats and recommendation kinds
(`table`), the recommendation itself (`recommendation`), and its renderings (`render`): text
and HTML email, JSON and CSV for the API, the rich table of the CLI."""

from report.recommendation import recommend
from report.render import email_message, print_report, results_csv, results_document
from report.table import COLUMNS, RECOMMENDATION_KINDS, format_cell, summary_rows

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
