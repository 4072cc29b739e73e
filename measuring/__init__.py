"""The measuring library: a combination's sandboxed, confined measuring process and what it reports.

`launcher.measure(spec)` starts `python -m measuring.measure` in a child confined to the memory size
(`confinement`), records where it ran (`environment`) and whether the machine was quiet (`machine_load`);
`levers` measures cold-start variants of an artifact the same way. Services, `serving/`, the CLI and the
benches import it; it imports no service.
"""
