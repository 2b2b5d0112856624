"""One error type and its codes in one place. The auth API's codes are GoTrue's snake_case
`error_code`s; the table API's are what PostgREST sends: a PostgreSQL SQLSTATE or one of PostgREST's
own `PGRST…` codes; Storage's are Supabase Storage's. blueprints/responses.py renders them in the body
each API promises."""

# The WSGI environ key under which the server hands the app an HTTP error it found in a request before
# the app could read it (one it could not parse, headers or a body over its limits): the app raises
# it, so that its answer is the API's JSON error. A client cannot set it: headers become HTTP_* keys.
REFUSED_BY_SERVER = "minibase.refused"


class Auth:
    """The auth API's error codes (GoTrue's names)."""

    ANONYMOUS_PROVIDER_DISABLED = "anonymous_provider_disabled"
    BAD_CODE_VERIFIER = "bad_code_verifier"
    BAD_JSON = "bad_json"
    BAD_OAUTH_CALLBACK = "bad_oauth_callback"
    BAD_OAUTH_STATE = "bad_oauth_state"
    BAD_REQUEST = "bad_request"
    BAD_JWT = "bad_jwt"
    CONFLICT = "conflict"
    DATABASE_UNAVAILABLE = "database_unavailable"
    EMAIL_EXISTS = "email_exists"
    EMAIL_NOT_CONFIRMED = "email_not_confirmed"
    EMAIL_SEND_FAILED = "email_send_failed"
    HOOK_PAYLOAD_INVALID_CONTENT_TYPE = "hook_payload_invalid_content_type"
    HOOK_PAYLOAD_OVER_SIZE_LIMIT = "hook_payload_over_size_limit"
    HOOK_TIMEOUT = "hook_timeout"
    HOOK_TIMEOUT_AFTER_RETRY = "hook_timeout_after_retry"
    FEATURE_DISABLED = "feature_disabled"
    FLOW_STATE_EXPIRED = "flow_state_expired"
    FLOW_STATE_NOT_FOUND = "flow_state_not_found"
    IDENTITY_ALREADY_EXISTS = "identity_already_exists"
    IDENTITY_NOT_FOUND = "identity_not_found"
    INVALID_API_KEY = "invalid_api_key"
    INVALID_CREDENTIALS = "invalid_credentials"
    NO_API_KEY = "no_api_key"
    NO_AUTHORIZATION = "no_authorization"
    INSUFFICIENT_AAL = "insufficient_aal"
    MANUAL_LINKING_DISABLED = "manual_linking_disabled"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    MFA_CHALLENGE_EXPIRED = "mfa_challenge_expired"
    MFA_FACTOR_NAME_CONFLICT = "mfa_factor_name_conflict"
    MFA_PHONE_ENROLL_NOT_ENABLED = "mfa_phone_enroll_not_enabled"
    MFA_WEBAUTHN_ENROLL_NOT_ENABLED = "mfa_webauthn_enroll_not_enabled"
    MFA_WEBAUTHN_VERIFY_NOT_ENABLED = "mfa_webauthn_verify_not_enabled"
    MFA_FACTOR_NOT_FOUND = "mfa_factor_not_found"
    MFA_IP_ADDRESS_MISMATCH = "mfa_ip_address_mismatch"
    MFA_VERIFICATION_FAILED = "mfa_verification_failed"
    MFA_VERIFICATION_REJECTED = "mfa_verification_rejected"
    NOT_ACCEPTABLE = "not_acceptable"
    NOT_ADMIN = "not_admin"
    NOT_FOUND = "not_found"
    OTP_DISABLED = "otp_disabled"
    OTP_EXPIRED = "otp_expired"
    OVER_EMAIL_SEND_RATE_LIMIT = "over_email_send_rate_limit"
    OVER_REQUEST_RATE_LIMIT = "over_request_rate_limit"
    PASSKEY_DISABLED = "passkey_disabled"
    PHONE_PROVIDER_DISABLED = "phone_provider_disabled"
    PROVIDER_DISABLED = "provider_disabled"
    PROVIDER_EMAIL_NEEDS_VERIFICATION = "provider_email_needs_verification"
    REAUTHENTICATION_NEEDED = "reauthentication_needed"
    REAUTHENTICATION_NOT_VALID = "reauthentication_not_valid"
    REQUEST_TOO_LARGE = "request_too_large"
    REFRESH_TOKEN_ALREADY_USED = "refresh_token_already_used"
    REFRESH_TOKEN_NOT_FOUND = "refresh_token_not_found"
    SAML_PROVIDER_DISABLED = "saml_provider_disabled"
    SESSION_EXPIRED = "session_expired"
    SESSION_NOT_FOUND = "session_not_found"
    SIGNUP_DISABLED = "signup_disabled"
    TOO_MANY_ENROLLED_MFA_FACTORS = "too_many_enrolled_mfa_factors"
    TOO_MANY_PASSKEYS = "too_many_passkeys"
    SINGLE_IDENTITY_NOT_DELETABLE = "single_identity_not_deletable"
    UNEXPECTED_FAILURE = "unexpected_failure"
    UNKNOWN = "unknown"  # GoTrue's code for an error that names none (a hook's own 4xx)
    UNSUPPORTED_GRANT_TYPE = "unsupported_grant_type"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    USER_ALREADY_EXISTS = "user_already_exists"
    USER_BANNED = "user_banned"
    USER_INACTIVE = "user_inactive"
    USER_NOT_FOUND = "user_not_found"
    USER_REFERENCED = "user_referenced"
    VALIDATION_FAILED = "validation_failed"
    WEAK_PASSWORD = "weak_password"
    WEB3_PROVIDER_DISABLED = "web3_provider_disabled"
    WEBAUTHN_CHALLENGE_EXPIRED = "webauthn_challenge_expired"
    WEBAUTHN_CHALLENGE_NOT_FOUND = "webauthn_challenge_not_found"
    WEBAUTHN_CREDENTIAL_EXISTS = "webauthn_credential_exists"
    WEBAUTHN_VERIFICATION_FAILED = "webauthn_verification_failed"


class Rest:
    """The table API's error codes: PostgreSQL SQLSTATEs and PostgREST's own, as PostgREST sends them."""

    BAD_QUERY = "PGRST100"  # a query parameter that does not parse
    BAD_BODY = "PGRST102"  # a body that is not JSON or not of the right shape
    RANGE_NOT_SATISFIABLE = "PGRST103"
    NOT_ACCEPTABLE = "PGRST107"  # no media type of the Accept header is offered
    AGGREGATES_DISABLED = "PGRST123"  # an aggregate in select while DB_AGGREGATES_ENABLED is off
    MAX_AFFECTED = "PGRST124"  # a strict Prefer: max-affected that the write would exceed
    MAX_AFFECTED_RPC = "PGRST128"  # a strict max-affected on a function that returns no set of rows
    NOT_IMPLEMENTED = "PGRST127"  # PostgREST's "Feature not implemented" (aggregates in a to-many spread)
    UNKNOWN_SCHEMA = "PGRST106"  # Accept-Profile or Content-Profile names a schema not served
    NOT_ONE_ROW = "PGRST116"  # a single object was asked for, not exactly one row matched
    NO_RELATIONSHIP = "PGRST200"
    AMBIGUOUS_RELATIONSHIP = "PGRST201"
    FUNCTION_NOT_FOUND = "PGRST202"
    COLUMN_NOT_FOUND = "PGRST204"  # a body's or columns='s column the table lacks
    TABLE_NOT_FOUND = "PGRST205"
    BAD_JWT = "PGRST301"
    REALTIME_UNAVAILABLE = "PGRST501"  # /realtime/v1 where no socket can be held (not PostgREST's)
    NOT_FOUND = "PGRST125"  # a path the API does not serve
    METHOD_NOT_ALLOWED = "PGRST105"
    MISCONFIGURED = "PGRST002"
    DATABASE_UNAVAILABLE = "PGRST001"
    UNEXPECTED = "PGRST000"
    TOO_LARGE = "PGRST413"
    RATE_LIMITED = "PGRST429"
    UNIQUE_VIOLATION = "23505"
    FOREIGN_KEY_VIOLATION = "23503"
    NOT_NULL_VIOLATION = "23502"
    CHECK_VIOLATION = "23514"
    INTEGRITY_VIOLATION = "23000"
    INVALID_TEXT = "22P02"  # a value that does not convert to the column's type
    STRING_TOO_LONG = "22001"
    OUT_OF_RANGE = "22003"
    UNDEFINED_COLUMN = "42703"
    DUPLICATE_ALIAS = "42712"  # one table embedded twice under one name
    UNDEFINED_FUNCTION = "42883"  # an operator the column's type lacks: a JSON path into text
    NO_CONFLICT_TARGET = "42P10"  # on_conflict names no unique constraint
    INSUFFICIENT_PRIVILEGE = "42501"
    READ_ONLY = "25006"  # a write to a view, to the users table or by a read-only function
    FILTER_REQUIRED = "21000"  # PATCH or DELETE without a filter


class Storage:
    """The storage API's error codes (Supabase Storage's `code`); `storage_error` adds the `error`
    name its body carries beside it."""

    NO_SUCH_BUCKET = "NoSuchBucket"
    NO_SUCH_KEY = "NoSuchKey"
    INVALID_KEY = "InvalidKey"
    INVALID_BUCKET_NAME = "InvalidBucketName"
    INVALID_REQUEST = "InvalidRequest"
    INVALID_PARAMETER = "InvalidParameter"
    INVALID_JWT = "InvalidJWT"
    INVALID_SIGNATURE = "InvalidSignature"
    INVALID_RANGE = "InvalidRange"
    INVALID_MIME_TYPE = "InvalidMimeType"
    ACCESS_DENIED = "AccessDenied"
    KEY_ALREADY_EXISTS = "KeyAlreadyExists"
    BUCKET_ALREADY_EXISTS = "BucketAlreadyExists"
    NOT_EMPTY = "ResourceNotEmpty"
    ENTITY_TOO_LARGE = "EntityTooLarge"
    NOT_FOUND = "NotFound"  # a path the API does not serve
    METHOD_NOT_ALLOWED = "MethodNotAllowed"
    UNAVAILABLE = "DatabaseTimeout"  # the database or the disk did not answer
    INTERNAL = "InternalError"
    RATE_LIMITED = "SlowDown"


class APIError(Exception):
    """An error a client is meant to see. `code` is one of Auth's or Rest's. `api` forces one API's
    body shape ("auth" or "rest"); by default the path of the request decides. `details` is null
    unless given, as PostgREST writes it."""

    def __init__(self, status, code, message, hint=None, details=None, headers=None, api=None, extra=None):
        super().__init__(message)
        self.api = api
        self.status = status
        self.error_code = code
        self.message = message
        self.hint = hint
        self.details = details
        self.headers = headers or {}
        self.extra = extra or {}  # more fields of GoTrue's body, for official clients


# --- errors raised in more than one place


def user_inactive(status=400):
    return APIError(status, Auth.USER_INACTIVE, "User account is inactive")


def user_banned(status=400):
    return APIError(status, Auth.USER_BANNED, "User is banned")


def user_not_found(status=404):
    if status == 401:
        return APIError(401, Auth.USER_NOT_FOUND, "User from sub claim in JWT does not exist")
    return APIError(status, Auth.USER_NOT_FOUND, "User not found")


def bad_jwt(cause=None, message=None):
    """GoTrue's words for a token that does not verify: its lower-case prefix, then the cause."""
    text = "invalid JWT: unable to parse or verify signature" + (f", {cause}" if cause else "")
    return APIError(401, Auth.BAD_JWT, message or text)


def no_authorization():
    return APIError(401, Auth.NO_AUTHORIZATION, "This endpoint requires a valid Bearer token")


def invalid_credentials():
    return APIError(400, Auth.INVALID_CREDENTIALS, "Invalid login credentials")


def refresh_token_not_found():
    return APIError(400, Auth.REFRESH_TOKEN_NOT_FOUND, "Invalid Refresh Token: Refresh Token Not Found")


def validation_failed(message):
    return APIError(400, Auth.VALIDATION_FAILED, message)


# What minibase does not offer, refused with GoTrue's own codes and texts for it switched off, so that
# an app shows the message it was written for.


def anonymous_disabled():
    return APIError(422, Auth.ANONYMOUS_PROVIDER_DISABLED, "Anonymous sign-ins are disabled")


def phone_disabled(message="Phone logins are disabled", status=400):
    return APIError(status, Auth.PHONE_PROVIDER_DISABLED, message)


def saml_disabled():
    return APIError(404, Auth.SAML_PROVIDER_DISABLED, "SAML 2.0 is disabled")


def oauth_server_disabled():
    return APIError(404, Auth.FEATURE_DISABLED, "OAuth server is disabled")


def web3_disabled():
    return APIError(422, Auth.WEB3_PROVIDER_DISABLED, "Web3 provider is disabled")


def bad_query(message, hint=None):
    return APIError(400, Rest.BAD_QUERY, message, hint=hint)


def bad_body(message, hint=None):
    return APIError(400, Rest.BAD_BODY, message, hint=hint)


def storage_error(status, code, message, error=None):
    """An error of the storage API: `error` is the name Supabase Storage sends beside its code (the
    SDKs read it: "not_found" is how storage3's exists() tells a missing object)."""
    return APIError(status, code, message, api="storage", extra={"error": error or code})


def object_not_found():
    return storage_error(404, Storage.NO_SUCH_KEY, "Object not found", "not_found")


# Supabase Storage's words for an upload past a size limit, whichever limit it is.
OBJECT_TOO_LARGE = "The object exceeded the maximum allowed size"


def object_too_large():
    return storage_error(413, Storage.ENTITY_TOO_LARGE, OBJECT_TOO_LARGE, "Payload too large")


def bucket_not_found():
    return storage_error(404, Storage.NO_SUCH_BUCKET, "Bucket not found", "Bucket not found")


def invalid_request(message):
    return storage_error(400, Storage.INVALID_REQUEST, message)
