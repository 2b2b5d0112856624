"""Sending e-mail: the templates (shipped in templates/email/, replaceable from EMAIL_TEMPLATES),
rendered with Jinja, sent with the standard library's smtplib within a 10 s timeout. Without
SMTP_HOST each message is written to the log instead, so that a developer can follow its link."""

import logging
import smtplib
import ssl
from email.message import EmailMessage
from email.utils import make_msgid

from jinja2 import (
    ChoiceLoader,
    Environment,
    FileSystemLoader,
    StrictUndefined,
    TemplateError,
    select_autoescape,
)

import config
import metrics
import turns
from config import setting
from errors import APIError, Auth
from extensions import state
from variables import ConfigError

log = logging.getLogger("minibase")

TIMEOUT = 10  # seconds, for connecting and for each SMTP command
BUILT_IN = config.ROOT / "templates" / "email"
SMTP_SETTINGS = ("SMTP_HOST", "SMTP_PORT", "SMTP_USER", "SMTP_PASS", "SMTP_SECURITY")
PARTS = ("subject", "txt", "html")
# What compose gives a template, with made-up values: checked at start.
EXAMPLE = {
    "link": "https://example.com/auth/v1/verify?token=t",
    "code": "123456",
    "confirmation_url": "https://example.com/auth/v1/verify?token=t",
    "token": "123456",
    "token_hash": "t",
    "redirect_to": "https://example.com/",
    "email": "someone@example.com",
    "site_url": "https://example.com",
}


def _environment(own):
    """The Jinja environment: the folder `own` first (a file there replaces the built-in one)."""
    folders = [own, str(BUILT_IN)] if own else [str(BUILT_IN)]
    return Environment(
        loader=ChoiceLoader([FileSystemLoader(folder) for folder in folders]),
        autoescape=select_autoescape(enabled_extensions=("html",), default_for_string=False),
        undefined=StrictUndefined,
    )


def templates():
    """The Jinja environment of this app's EMAIL_TEMPLATES, made once."""
    cache = state()
    if cache.mail_templates is None:
        cache.mail_templates = _environment(setting("EMAIL_TEMPLATES"))
    return cache.mail_templates


def check_templates(app):
    """Render each of EMAIL_TEMPLATES' templates once, at start: one that does not parse, or that uses
    a variable no mail gives, stops the start naming its file, rather than failing the request that
    would send it."""
    own = app.config["EMAIL_TEMPLATES"]
    if not own:
        return
    env = _environment(own)
    for kind in sorted({path.stem for path in BUILT_IN.iterdir()}):
        for part in PARTS:
            try:
                env.get_template(f"{kind}.{part}").render(EXAMPLE)
            except TemplateError as exc:
                raise ConfigError(f"EMAIL_TEMPLATES: {kind}.{part}: {exc.message}") from None


def compose(kind, to, **context):
    """The message of `kind` for `to`. `context` has the link and the code (also as GoTrue names them:
    confirmation_url, token, token_hash, redirect_to); `email` and `site_url` are added."""
    env = templates()
    context = {**context, "email": to, "site_url": setting("SITE_URL")}
    message = EmailMessage()
    message["Subject"] = env.get_template(f"{kind}.subject").render(context).strip()
    message["From"] = setting("SMTP_SENDER")
    message["To"] = to
    message["Message-ID"] = make_msgid(domain="minibase")
    message.set_content(env.get_template(f"{kind}.txt").render(context))
    message.add_alternative(env.get_template(f"{kind}.html").render(context), subtype="html")
    return message


def send(message):
    """Send `message`, or log it when no SMTP_HOST is set; a 503 email_send_failed when the server
    cannot be reached or refuses it (the cause goes to the log, never the message's link or code)."""
    settings = {name: setting(name) for name in SMTP_SETTINGS}
    host = settings["SMTP_HOST"]
    if not host:
        log.warning("SMTP_HOST is not set: the e-mail is written here instead of sent\n%s", message)
        return
    with turns.waiting():  # the SMTP server's answers
        try:
            if settings["SMTP_SECURITY"] == "ssl":
                server = smtplib.SMTP_SSL(
                    host, settings["SMTP_PORT"], timeout=TIMEOUT, context=ssl.create_default_context()
                )
            else:
                server = smtplib.SMTP(host, settings["SMTP_PORT"], timeout=TIMEOUT)
            with server:
                if settings["SMTP_SECURITY"] == "starttls":
                    server.starttls(context=ssl.create_default_context())
                if settings["SMTP_USER"]:
                    server.login(settings["SMTP_USER"], settings["SMTP_PASS"] or "")
                server.send_message(message)
        except (OSError, smtplib.SMTPException) as exc:
            metrics.MAILS_FAILED.inc()
            port, cause = settings["SMTP_PORT"], type(exc).__name__
            log.error("sending e-mail through %s:%s failed: %s", host, port, cause)
            raise APIError(503, Auth.EMAIL_SEND_FAILED, "Error sending the e-mail, try again later") from None
    metrics.MAILS_SENT.inc()


def warn_if_not_configured(app):
    if not app.config["SMTP_HOST"] and not app.config["HOOK_SEND_EMAIL_ENABLED"]:
        log.warning("SMTP_HOST is not set: e-mails (recovery, confirmation, magic links) go to this log")
