"""Where security decisions meet the filesystem: :mod:`.fs` is the only module that judges
modes, owners and symlinks. Nothing outside this package in ``security`` does I/O (a test checks
it by folder)."""
