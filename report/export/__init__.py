"""A run's measured combination shipped as a deployable AWS Lambda function (`ayci export`, the
API's `GET /runs/{id}/export`): `deployment` decides (memory, architecture, timeout, serving,
requirements, packaging), `bundle` writes the folder; `function/` is the handler it ships."""

from report.export.bundle import export_run, write_folder_zip
from report.export.deployment import Deployment, ExportError

__all__ = ["Deployment", "ExportError", "export_run", "write_folder_zip"]
