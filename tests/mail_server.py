"""A mail server's inbox for the tests of e-mail (tests/test_email.py, tests/test_once.py): the
handler of a real aiosmtpd SMTP server in the test's process, keeping what it receives; and the
link and code a mail carries."""

import email
import re
from email import policy


class Inbox:
    """An SMTP server's handler that keeps what it receives, or refuses it when told to."""

    def __init__(self):
        self.messages = []
        self.refuse = False

    async def handle_DATA(self, server, session, envelope):
        if self.refuse:
            return "550 mailbox unavailable"
        self.messages.append(email.message_from_bytes(envelope.content, policy=policy.default))
        return "250 OK"

    def last(self, to=None):
        found = [m for m in self.messages if to is None or m["To"] == to]
        assert found, f"no mail to {to}"
        return found[-1]


def link_and_code(message):
    text = message.get_body(("plain",)).get_content()
    link = re.search(r"(http\S+/auth/v1/verify\?\S+)", text).group(1)
    code = re.search(r"code: (\d{6})", text).group(1)
    return link, code
