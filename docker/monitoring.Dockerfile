# Prometheus and Alertmanager for the docker-compose deployment's `monitoring` profile, from
# Debian's packages (`prometheus` 2.42, `prometheus-alertmanager` 0.25 in bookworm) on the
# same base image as the runtime image: no registry image is needed.
#
#   docker build -t tandem-monitoring:local -f docker/monitoring.Dockerfile docker/
#
# One image for both services (the compose file picks the command): the two packages share
# their user and most of the download. The configuration is mounted from deploy/prometheus/
# at run time, so editing a rule needs no rebuild. tandem-probe answers the health checks.
FROM debian:bookworm-slim

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        prometheus prometheus-alertmanager \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o prometheus -g prometheus -m 0750 /var/lib/prometheus/metrics2 /var/lib/prometheus/alertmanager

COPY tandem-probe /usr/local/bin/

USER prometheus
WORKDIR /var/lib/prometheus
EXPOSE 9090 9093
ENTRYPOINT []
CMD ["prometheus", "--version"]
