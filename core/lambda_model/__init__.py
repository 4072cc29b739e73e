"""The Lambda model, apart from the runtime kernel: latencies predicted at memory sizes that were
not measured (`prediction`), and what cold starts cost under a traffic profile (`traffic`).
Both read measured results; nothing in the kernel imports them."""
