"""Deploy-verified integration tests: one `integ_<family>.py` app per construct family, run by integ-runner.

See integ/README.md. Offline, tests/test_integ.py compares each app's synthesis with its committed
snapshot; `make integ` deploys, asserts and destroys them with your credentials.
"""
