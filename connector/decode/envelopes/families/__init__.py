"""One module per envelope family, each defining ``FAMILY`` (see :mod:`..registry`)."""
