"""htpasswd files for Distribution, which accepts bcrypt entries only.

The `bcrypt` package (test extra) rather than apache2-utils' `htpasswd -B`: a pip wheel that the
test session installs with everything else, where the apt package would need root, an apt-get
update and a Debian mirror on every fresh machine, for one function.
"""

from __future__ import annotations

from pathlib import Path

import bcrypt


def write_htpasswd(path: Path, users: dict[str, str]) -> Path:
    # cost 5: the minimum Go's bcrypt accepts is 4; the default 12 costs ~0.3 s per check
    lines = [f"{user}:{bcrypt.hashpw(pw.encode(), bcrypt.gensalt(rounds=5)).decode()}" for user, pw in users.items()]
    path.write_text("\n".join(lines) + "\n")
    return path
