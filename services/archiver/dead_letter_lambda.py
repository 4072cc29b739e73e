"""AWS Lambda entrypoint for every service's dead-letter queue: keeps each dead letter and
ends what it stood for (its combination or its run)."""

from ayci.lambda_entry import make_dead_letter_handler

handler = make_dead_letter_handler()
