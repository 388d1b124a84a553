"""The Flower components of this app: pflax's ServerApp and ClientApp, configured by the run config."""
from pflax.flower import client_app, server_app

server = server_app()
client = client_app()
