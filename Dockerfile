# One image for every service; the compose file picks the service by command.
FROM python:3.11-slim
WORKDIR /app
COPY requirements.txt .
# torch 2.13.0 CPU: on a machine with the internet, take the CPU wheel index
RUN pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu -r requirements.txt
COPY . .
ENV PYTHONPATH=/app AYCI_LOG_FORMAT=json
