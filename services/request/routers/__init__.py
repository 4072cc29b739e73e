"""The request service's routes, one router per resource: the page, models, uploads, runs."""
