# syntax=docker/dockerfile:1
# The AYCI Lambda image: every function of infra/template.yaml runs it; each names its handler
# as the image's command (ImageConfig.Command). Built once per architecture, because Lambda runs
# single-architecture images only (the base image is multi-arch, so one file serves both):
#   docker buildx build --platform linux/amd64 -f infra/lambda.Dockerfile -t REPO:TAG-x86_64 .
#   docker buildx build --platform linux/arm64 -f infra/lambda.Dockerfile -t REPO:TAG-arm64 .
# `python -m infra deploy` does both and pushes them to the stack's ECR repository.
# Expected size: ~2.3 GB uncompressed per architecture (scripts/lambda_image_size.py; it could
# not be built on the machine this was written on, which has no Docker engine).
# Python 3.12 on Amazon Linux 2023: the runtime SnapStart takes (Python 3.12 and later;
# data/lambda_limits.json), where python:3.11 ran on Amazon Linux 2 (end of life 2026-06-30).
# This project runs Python 3.11 elsewhere (.venv, Dockerfile); the image is built only by AWS deploys.
FROM public.ecr.aws/lambda/python:3.12

# TVM links the libraries it compiles with the system compiler (the converter function); the
# measuring functions only load them. Nothing is compiled at a measuring function's cold start:
# TVM artifacts arrive compiled, ONNX models converted, Python byte-compiled below.
# Amazon Linux 2023's minimal image has dnf (microdnf), not yum.
RUN dnf install -y gcc gcc-c++ && dnf clean all && rm -rf /var/cache/dnf

COPY requirements.txt ${LAMBDA_TASK_ROOT}/
# torch's CPU build (the default index's x86_64 wheel carries CUDA libraries Lambda has no use for)
RUN pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu \
        -r ${LAMBDA_TASK_ROOT}/requirements.txt

COPY adapters ${LAMBDA_TASK_ROOT}/adapters
COPY ayci ${LAMBDA_TASK_ROOT}/ayci
COPY core ${LAMBDA_TASK_ROOT}/core
COPY data ${LAMBDA_TASK_ROOT}/data
COPY engines ${LAMBDA_TASK_ROOT}/engines
COPY measuring ${LAMBDA_TASK_ROOT}/measuring
COPY report ${LAMBDA_TASK_ROOT}/report
COPY schemas ${LAMBDA_TASK_ROOT}/schemas
COPY services ${LAMBDA_TASK_ROOT}/services
COPY workloads ${LAMBDA_TASK_ROOT}/workloads
# /var/task is read-only on Lambda: byte-compile now, or every cold start compiles again
RUN python -m compileall -q ${LAMBDA_TASK_ROOT}

ENV AYCI_LOG_FORMAT=json PYTHONPATH=${LAMBDA_TASK_ROOT}
CMD ["services.inference.measuring_lambda.handler"]
