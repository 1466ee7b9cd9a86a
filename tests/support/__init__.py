"""Support code for the test suite: brokers and servers the tests start for themselves."""
