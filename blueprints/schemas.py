"""What the auth API accepts in a body, as marshmallow schemas; a misfit is a 400 validation_failed.
A body asking for what minibase does not offer (a phone, an anonymous sign-in, a phone or WebAuthn
factor) gets GoTrue's own error for it switched off."""

import re
from datetime import timedelta

from flask import request
from marshmallow import EXCLUDE, RAISE, Schema, ValidationError, fields, pre_load, validate

from auth import anonymous, emails
from auth.passwords import MAX_BYTES
from errors import APIError, Auth, anonymous_disabled, phone_disabled, validation_failed
from values import strict_json

E164 = re.compile(r"[1-9][0-9]{1,14}")  # GoTrue's phone format, once "+" and spaces are gone
# GoTrue fields official clients may send to PUT /user that mean nothing here.
IGNORED_USER_FIELDS = frozenset(
    {
        "phone",
        "nonce",
        "code_challenge",
        "code_challenge_method",
        "channel",
        "email_redirect_to",
        "gotrue_meta_security",
        "captcha_token",
        "app_metadata",
    }
)


def _not_too_long(password):
    if "\0" in password:  # bcrypt refuses it; a C library behind another app would cut there
        raise ValidationError("Password cannot contain a NUL character.")
    if len(password.encode()) > MAX_BYTES:
        raise ValidationError(f"Password cannot be longer than {MAX_BYTES} bytes.")


class _Base(Schema):
    @pre_load
    def normalise_email(self, data, **kwargs):
        if isinstance(data.get("email"), str):
            data = {**data, "email": data["email"].strip().lower()}
        return data


INVALID_EMAIL = "Unable to validate email address: invalid format"  # GoTrue's words


def _not_reserved(email):
    if anonymous.reserved(email):  # the domain that marks anonymous users is nobody's address
        raise ValidationError(INVALID_EMAIL)


EMAIL_RULES = [validate.Length(max=255), validate.Email(error=INVALID_EMAIL), _not_reserved]


class _Pkce(_Base):
    """A flow that may be a PKCE one: supabase-js sends these with flowType 'pkce'."""

    code_challenge = fields.String(allow_none=True, load_default=None)
    code_challenge_method = fields.String(allow_none=True, load_default=None)


def given(data, name):
    """Whether a request body names `name` (GoTrue counts an empty string or null as not given)."""
    return isinstance(data, dict) and data.get(name) not in (None, "")


class SignUpSchema(_Pkce):
    class Meta:
        unknown = EXCLUDE

    @pre_load
    def refuse_what_is_not_offered(self, data, **kwargs):
        """signInAnonymously() sends neither email, phone nor password; signUp({phone}) a phone.
        A password without an email stays validation_failed, naming email. An anonymous sign-up
        (allowed) is AnonymousSignUpSchema's: the view asks `is_anonymous` first."""
        if not given(data, "email"):
            if given(data, "phone"):
                raise phone_disabled("Phone signups are disabled")
            if not given(data, "password"):
                raise anonymous_disabled()
        return data

    @staticmethod
    def is_anonymous(data):
        """Whether a sign-up body is signInAnonymously()'s: neither email, phone nor password."""
        named = ("email", "phone", "password")
        return isinstance(data, dict) and not any(given(data, name) for name in named)

    email = fields.String(required=True, validate=EMAIL_RULES)
    password = fields.String(required=True, validate=_not_too_long)
    data = fields.Dict(keys=fields.String(), load_default=dict)


class AnonymousSignUpSchema(Schema):
    class Meta:
        unknown = EXCLUDE

    data = fields.Dict(keys=fields.String(), load_default=dict, allow_none=True)


class PasskeyVerifySchema(Schema):
    """The second step of a passkey ceremony: the challenge's id and the browser's credential."""

    class Meta:
        unknown = EXCLUDE

    challenge_id = fields.String(required=True, validate=validate.Length(max=64))
    credential = fields.Dict(keys=fields.String(), required=True)


class PasskeyRenameSchema(Schema):
    class Meta:
        unknown = EXCLUDE

    friendly_name = fields.String(allow_none=True, load_default=None)


class PasswordGrantSchema(_Base):
    class Meta:
        unknown = EXCLUDE

    @pre_load
    def refuse_phone(self, data, **kwargs):
        if given(data, "phone") and not given(data, "email"):
            raise phone_disabled(status=422)
        return data

    email = fields.String(required=True, validate=EMAIL_RULES)
    password = fields.String(required=True, validate=_not_too_long)


class RefreshGrantSchema(Schema):
    class Meta:
        unknown = EXCLUDE

    refresh_token = fields.String(required=True)


class PkceGrantSchema(Schema):
    class Meta:
        unknown = EXCLUDE

    auth_code = fields.String(load_default="", validate=validate.Length(max=200))
    code_verifier = fields.String(load_default="", validate=validate.Length(max=200))


class IdTokenGrantSchema(Schema):
    class Meta:
        unknown = EXCLUDE

    provider = fields.String(required=True, validate=validate.Length(max=50))
    id_token = fields.String(required=True, validate=validate.Length(max=20000))
    nonce = fields.String(allow_none=True, load_default=None, validate=validate.Length(max=500))
    link_identity = fields.Boolean(allow_none=True, load_default=False)  # linkIdentity with a token


class UserUpdateSchema(_Base):
    class Meta:
        unknown = RAISE

    email = fields.String(validate=EMAIL_RULES)
    password = fields.String(validate=_not_too_long)
    username = fields.String(allow_none=True)
    first_name = fields.String(allow_none=True)
    last_name = fields.String(allow_none=True)
    about = fields.String(allow_none=True)
    data = fields.Dict(keys=fields.String(), allow_none=True)
    nonce = fields.String()  # the reauthentication code a password change may need

    ignored_fields = IGNORED_USER_FIELDS - {"nonce"}

    @pre_load
    def drop_gotrue_fields(self, data, **kwargs):
        return {k: v for k, v in data.items() if k not in self.ignored_fields}


class BanDuration(fields.Field):
    """GoTrue's `ban_duration`: a Go duration such as "24h", "1h30m" or "90s", as a timedelta, or
    "none" (None), which lifts a ban. At most a hundred years."""

    UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)")
    LONGEST = timedelta(days=36525)

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, str):
            raise ValidationError('Not a duration such as "24h", or "none".')
        if value.strip().lower() == "none":
            return None
        text = value.strip()
        if not text or self.PART.sub("", text):
            raise ValidationError('Not a duration such as "24h", or "none".')
        seconds = sum(float(number) * self.UNITS[unit] for number, unit in self.PART.findall(text))
        if seconds > self.LONGEST.total_seconds():
            raise ValidationError("Longer than a hundred years.")
        return timedelta(seconds=seconds)


class AdminUserSchema(UserUpdateSchema):
    """PUT /admin/users/{id}: what a user may change, `active`, `ban_duration`, `app_metadata` and
    `email_confirm`; GoTrue's `user_metadata` is `data`."""

    ignored_fields = (IGNORED_USER_FIELDS - {"app_metadata"}) | {
        "phone_confirm",
        "role",
        "aud",
    }

    active = fields.Boolean()
    user_metadata = fields.Dict(keys=fields.String(), allow_none=True, data_key="user_metadata")
    app_metadata = fields.Dict(keys=fields.String(), allow_none=True)
    ban_duration = BanDuration(allow_none=True)
    email_confirm = fields.Boolean()


class AdminCreateSchema(AdminUserSchema):
    email = fields.String(required=True, validate=EMAIL_RULES)
    password = fields.String(required=True, validate=_not_too_long)


class PageSchema(Schema):
    class Meta:
        unknown = EXCLUDE

    page = fields.Integer(load_default=1, validate=validate.Range(min=1, max=1_000_000_000))
    per_page = fields.Integer(load_default=50, validate=validate.Range(min=1, max=1000))

    @pre_load
    def empty_means_default(self, data, **kwargs):
        # The SDKs send ?page=&per_page= when the caller gives neither.
        return {key: value for key, value in data.items() if value != ""}


class AuditPageSchema(PageSchema):
    q = fields.String(load_default="", validate=validate.Length(max=200))


def json_body():
    """The request body as a JSON object, or a 400 bad_json."""
    try:
        body = strict_json(request.get_data(cache=True))
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise APIError(400, Auth.BAD_JSON, "Could not parse request body as JSON")
    return body


def load(schema, body=None):
    """`body` (the request's JSON object by default) loaded through `schema`, or a 400 naming the field."""
    try:
        return schema.load(json_body() if body is None else body)
    except ValidationError as exc:
        field, messages = sorted(exc.normalized_messages().items())[0]
        message = messages[0] if isinstance(messages, list) else str(messages)
        if message == "Unknown field.":
            message = "is not a field that can be updated"
        raise validation_failed(message if message == INVALID_EMAIL else f"{field}: {message}") from None


# --- e-mail flows (emails.py); official clients add fields of their own, which are ignored


class RecoverSchema(_Pkce):
    class Meta:
        unknown = EXCLUDE

    email = fields.String(required=True, validate=EMAIL_RULES)


class OtpSchema(RecoverSchema):
    create_user = fields.Boolean(load_default=True)
    data = fields.Dict(keys=fields.String(), load_default=dict, allow_none=True)

    @pre_load
    def refuse_phone(self, data, **kwargs):
        if given(data, "phone") and not given(data, "email"):
            raise phone_disabled("Unsupported phone provider")
        return data


class ResendSchema(RecoverSchema):
    type = fields.String(required=True, validate=validate.OneOf(("signup", "email_change")))

    @pre_load
    def refuse_phone(self, data, **kwargs):
        if isinstance(data, dict) and data.get("type") == "sms" and not given(data, "phone"):
            raise validation_failed("Type provided requires a phone number")
        if given(data, "phone") and not given(data, "email"):
            raise phone_disabled()
        return data


class VerifySchema(_Base):
    class Meta:
        unknown = EXCLUDE

    type = fields.String(required=True)
    token_hash = fields.String(validate=validate.Length(max=200))
    email = fields.String(validate=EMAIL_RULES)
    token = fields.String(validate=validate.Length(max=200))

    @pre_load
    def refuse_phone(self, data, **kwargs):
        """A phone's code (verifyOtp({phone, token, type: 'sms'})): no phone user exists here, so it
        is what GoTrue answers a code that matches nothing, once the number is E.164 as GoTrue checks
        first."""
        phone_type = isinstance(data, dict) and data.get("type") in ("sms", "phone_change")
        phone = data.get("phone") if phone_type else None
        if isinstance(phone, str) and not E164.fullmatch(phone.removeprefix("+").replace(" ", "")):
            raise validation_failed("Invalid phone number format (E.164 required)")
        if phone_type or (
            given(data, "phone") and not given(data, "email") and not given(data, "token_hash")
        ):
            raise emails.otp_expired()
        return data


class GenerateLinkSchema(RecoverSchema):
    type = fields.String(required=True)
    new_email = fields.String(validate=EMAIL_RULES)  # the email_change_* links'

    @pre_load
    def normalise_new_email(self, data, **kwargs):
        if isinstance(data.get("new_email"), str):
            data = {**data, "new_email": data["new_email"].strip().lower()}
        return data

    password = fields.String(validate=_not_too_long)
    data = fields.Dict(keys=fields.String(), allow_none=True)
    redirect_to = fields.String(validate=validate.Length(max=2000))


class InviteSchema(RecoverSchema):
    data = fields.Dict(keys=fields.String(), allow_none=True)


# --- a second factor (auth/mfa.py)


class EnrollFactorSchema(Schema):
    class Meta:
        unknown = EXCLUDE

    factor_type = fields.String(required=True)
    friendly_name = fields.String(allow_none=True, load_default=None)
    issuer = fields.String(allow_none=True, load_default=None)

    @pre_load
    def refuse_what_is_not_offered(self, data, **kwargs):
        kind = data.get("factor_type") if isinstance(data, dict) else None
        if kind == "phone":
            raise APIError(422, Auth.MFA_PHONE_ENROLL_NOT_ENABLED, "MFA enroll is disabled for Phone")
        return data


class VerifyFactorSchema(Schema):
    class Meta:
        unknown = EXCLUDE  # supabase-py sends factor_id too

    challenge_id = fields.String(required=True, validate=validate.Length(max=64))
    code = fields.String(load_default="", validate=validate.Length(max=64))
    webauthn = fields.Raw(load_default=None)  # a WebAuthn factor's {type, credential_response}
