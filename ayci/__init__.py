"""AYCI: wiring, adapters and the CLI shared by the services."""
