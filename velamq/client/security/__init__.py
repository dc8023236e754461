"""Credentials and TLS for the client and the admin client.

    _auth      the authentication plugins (token, basic, TLS), shaped as the official client's
    _settings  ConnectionSecurity: credentials and TLS settings by name, one picklable value
    _tls       the client's TLS context from the official client's option names

May import: the client's _errors. Imported by: transport, client/_config.py, client/_admin_client.py.
"""
