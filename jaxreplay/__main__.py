from jaxreplay.cli import entry

entry()
