"""Deploy tooling: the stack (`template.yaml`, `stack.py`), AWS deploy and destroy (`aws.py`), and the
real path on this machine (`localstack.py`: LocalStack and one process per service)."""
