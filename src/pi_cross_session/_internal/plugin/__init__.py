"""The host extension: the session runtime, tools, commands and host adapters."""
