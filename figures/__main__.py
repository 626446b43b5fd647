"""``python -m figures``: the ``tdyn`` command (:mod:`figures._console`)."""

from figures._console import main

main()
