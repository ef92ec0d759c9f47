"""The IETF responsiveness test (RPM, draft-ietf-ippm-responsiveness-08): its arithmetic
(method.py), the client run in a host (client.py), the HTTP/2 server (server.py) and the
workload that runs both (workload.py)."""
