"""The HTTP server: one app factory (`server.app.create_app`), routes, auth and the JSON error shape."""
