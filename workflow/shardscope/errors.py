"""The one exception type for user errors: bad input files, bad config values, bad flags.

The command line turns it into one sentence on stderr and exit status 2, without a
traceback; anything else is a bug and keeps its traceback.
"""


class UserError(Exception):
    """A problem the user can fix; the message names the file or field and what was expected."""
