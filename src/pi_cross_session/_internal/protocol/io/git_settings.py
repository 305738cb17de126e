"""What reading a cwd's git metadata for a listing may spend: the files read directly and the
fallback ``git`` processes. The git reader's own room
(:mod:`pi_cross_session._internal.protocol.io.gitinfo`; the wire's and the receiver's bounds are in
:mod:`pi_cross_session._internal.protocol.limits`)."""

from typing import Final

#: Git metadata per cwd: wall time and output size.
GIT_TIMEOUT_S: Final = 1.5
GIT_OUTPUT_CAP_BYTES: Final = 131_072
#: Fallback ``git`` processes run at once; a registry full of odd repositories must not fork-bomb.
MAX_GIT_SUBPROCESSES: Final = 4
#: ``HEAD``, a loose ref, a ``.git`` file or ``commondir``: one line naming a ref or a path.
MAX_GIT_SMALL_FILE_BYTES: Final = 4_096
#: A repository config larger than this is left to git.
MAX_GIT_CONFIG_BYTES: Final = 262_144
#: A ``packed-refs`` larger than this (monorepos with huge tag sets) is left to git.
MAX_GIT_PACKED_REFS_BYTES: Final = 16_777_216
