"""Tests of the lockbroker Python client (run by tests/clients/with-broker.sh)."""
