"""`python -m infra deploy|destroy|delete`: deploy AYCI's stack to AWS (or LocalStack), and remove it."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from infra.stack import DEFAULT_SENDER, _endpoint, delete_stack, deploy_stack


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m infra", description="Deploy or remove the AYCI stack.")
    commands = parser.add_subparsers(dest="command")
    deploy = commands.add_parser(
        "deploy", help="create or update the stack (AWS: images and template, shown and confirmed first)"
    )
    deploy.add_argument("stack_positional", nargs="?", metavar="stack", help=argparse.SUPPRESS)
    deploy.add_argument(
        "prefix", nargs="?", help=argparse.SUPPRESS
    )  # LocalStack: resource names' prefix (default: the stack's name)
    deploy.add_argument(
        "--stack", help="the stack's name; its resources and bucket are named after it (lower case, at most 30)"
    )
    deploy.add_argument("--region", help="AWS region (default: the configured one)")
    deploy.add_argument("--yes", action="store_true", help="apply the change set without asking")
    deploy.add_argument(
        "--sender-email",
        help=(
            f"the address run emails are sent from; SES mails it a link to verify "
            f"(default {DEFAULT_SENDER}; kept on an update)"
        ),
    )
    deploy.add_argument("--email-allowed", help='where run emails may go: addresses, "@domain", or "*" (default: none)')
    deploy.add_argument(
        "--api-keys",
        help="KEY:OWNER,... of the HTTP API, kept in a Secrets Manager secret "
        "(needed on the first deploy; kept as they are on an update when not given)",
    )
    deploy.add_argument(
        "--image-x86-64",
        help="an x86_64 image built elsewhere from infra/lambda.Dockerfile (ECR URI); then no Docker is needed",
    )
    deploy.add_argument("--image-arm64", help="the arm64 image, likewise")
    destroy = commands.add_parser(
        "destroy", help="delete the stack and its images; the data bucket stays unless --delete-data"
    )
    destroy.add_argument("--stack", required=True)
    destroy.add_argument("--region")
    destroy.add_argument("--yes", action="store_true", help="delete without asking")
    destroy.add_argument(
        "--delete-data", action="store_true", help="delete the data bucket too (models, artifacts, results)"
    )
    delete = commands.add_parser("delete", help="delete a stack (LocalStack and tests; on AWS use destroy)")
    delete.add_argument("stack", nargs="?", default="ayci")
    args = parser.parse_args(argv or ["deploy"])

    if args.command == "delete":
        delete_stack(args.stack)
        return
    on_localstack = _endpoint(None) is not None
    if args.command == "deploy" and (on_localstack or args.stack is None):
        if not on_localstack:
            parser.error("deploy on AWS: pass --stack NAME (python -m infra deploy --stack NAME [--region R])")
        stack = args.stack or args.stack_positional or "ayci"
        print(
            json.dumps(
                asdict(deploy_stack(stack, args.prefix or stack, sender_email=args.sender_email or DEFAULT_SENDER)),
                indent=2,
            )
        )
        return
    from infra import aws as aws_deploy

    try:
        if args.command == "deploy":
            options = aws_deploy.DeployOptions(
                stack=args.stack,
                region=args.region,
                yes=args.yes,
                sender_email=args.sender_email,
                email_allowed=args.email_allowed,
                api_keys=args.api_keys,
                image_x86_64=args.image_x86_64,
                image_arm64=args.image_arm64,
            )
            aws_deploy.deploy(options, confirm=aws_deploy.ask)
        else:
            aws_deploy.destroy(
                args.stack, args.region, yes=args.yes, delete_data=args.delete_data, confirm=aws_deploy.ask
            )
    except aws_deploy.DeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
