"""Third-party sign-in: /authorize and /callback (the authorization code flow, with a signed,
expiring, single-use `state`), the id_token grant, and the identities that tie a provider's account
to a user.

Which user a provider's account signs in: the user its identity is linked to; else the user whose
address the provider says it has *verified* (the identity is linked to them); else a new user whose
password hash can never verify (unless sign-up is disabled). An address the provider has not
verified signs nobody in, least of all the account that has it."""

import logging
import secrets
import uuid
from urllib.parse import quote, urlencode

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from auth import accounts, anonymous, pkce, providers, sessions, signups, tokens
from auth.passwords import unusable_hash
from auth.redirects import redirect_target
from auth.users import identities, is_anonymous, load_user, user_object
from auth.verification import with_fragment, with_query
from config import setting
from database import transactions
from database.transactions import transactional
from errors import APIError, Auth, validation_failed
from extensions import db
from models import upsert
from models.auth import FlowState, Identity, Profile

STATE_LIFETIME = 600  # seconds a user has to sign in at the provider
log = logging.getLogger("minibase")
METHOD = "oauth"  # GoTrue's authentication method (the session's `amr`) for a provider sign-in


def _provider(name, id_token=False):
    chosen = providers.provider(name)
    allowed = providers.ID_TOKEN_PROVIDERS if id_token else providers.KINDS
    if chosen is None or name not in allowed or (name == "apple" and not id_token):
        raise validation_failed(f"Unsupported provider: provider {name} could not be found or is not enabled")
    return chosen


# --- /authorize


def authorize(name, redirect_to, scopes, challenge, link_user_id=None):
    """The provider's sign-in page to send the browser to, with a `state` naming a new flow; a 503
    when the provider cannot be reached (its endpoints are read before any flow is kept)."""
    chosen = _provider(name)
    try:
        providers.endpoints(chosen)
    except providers.ProviderError as exc:
        raise unavailable(chosen.name, exc) from None
    flow_id, nonce = transactions.write(_open_flow, chosen.name, redirect_to, challenge, link_user_id)
    state = tokens.oauth_state(flow_id, setting("JWT_SECRET"), STATE_LIFETIME)
    return providers.authorization_url(chosen, state, nonce, scopes)


def authorize_in_browser(name, redirect_to, scopes, challenge):
    """GET /authorize, followed by a browser: as authorize(), but a provider that cannot be reached
    sends the browser back to `redirect_to` with the error, as the callback's errors do. A request
    that is not one (no such provider, a bad challenge) stays a 400, as GoTrue answers it."""
    try:
        return authorize(name, redirect_to, scopes, challenge)
    except APIError as failure:
        if failure.status < 500:
            raise
        return error_redirect(redirect_target(redirect_to), failure)


def unavailable(name, exc):
    """The 503 for a provider that cannot be reached or answers nonsense: the cause goes to the log."""
    log.warning("provider %s unavailable: %s", name, exc)
    return APIError(
        503, Auth.UNEXPECTED_FAILURE, f"The {name} provider could not be reached; try again later"
    )


def _open_flow(name, redirect_to, challenge, link_user_id):
    pkce.sweep()
    flow = FlowState(
        id=str(uuid.uuid4()),
        method=METHOD,
        provider=name,
        code_challenge=challenge[0] if challenge else None,
        code_challenge_method=challenge[1] if challenge else None,
        redirect_to=redirect_target(redirect_to),
        link_user_id=link_user_id,
        nonce=secrets.token_urlsafe(24),
        created_at=tokens.utcnow(),
    )
    db.session.add(flow)
    return flow.id, flow.nonce


# --- /callback


def callback(state, code, error=None, error_description=None):
    """Where the browser goes once the provider sent it back: `redirect_to` with the session in
    the fragment (or `?code=` under PKCE), or with the error; never a page of our own."""
    try:
        flow = transactions.write(_take_flow, state)
    except APIError as failure:
        return error_redirect(setting("SITE_URL"), failure)
    try:
        if error:
            raise APIError(403, Auth.BAD_OAUTH_CALLBACK, error_description or error, extra={"error": error})
        if not code:
            raise APIError(400, Auth.BAD_OAUTH_CALLBACK, "OAuth callback with missing authorization code")
        try:
            profile = providers.profile_from_code(_provider(flow["provider"]), code, flow["nonce"])
        except providers.ProviderRefused as exc:
            log.warning("sign-in with %s refused: %s", flow["provider"], exc)
            raise APIError(
                400, Auth.BAD_OAUTH_CALLBACK, "Unable to exchange external code with the provider"
            ) from None
        except providers.ProviderError as exc:
            raise unavailable(flow["provider"], exc) from None
        outcome, result = _unless_raced(_finish, flow, profile)
    except APIError as failure:
        return error_redirect(flow["redirect_to"], failure)
    if outcome == "code":
        return with_query(flow["redirect_to"], code=result)
    return with_fragment(flow["redirect_to"], result, provider_token="", provider_refresh_token="")


def _take_flow(state):
    """The flow a `state` names, used up: a forged, replayed or expired state is refused."""
    try:
        flow_id = tokens.decode_oauth_state(state or "", setting("JWT_SECRET"))
    except tokens.TokenError as exc:
        message = "OAuth state has expired" if exc.expired else "OAuth state parameter is invalid"
        raise APIError(400, Auth.BAD_OAUTH_STATE, message) from None
    flow = db.session.execute(
        select(FlowState).where(FlowState.id == flow_id, FlowState.method == METHOD).with_for_update()
    ).scalar_one_or_none()
    if flow is None or flow.auth_code_hash is not None:
        raise APIError(400, Auth.BAD_OAUTH_STATE, "OAuth state not found or already used")
    taken = {column: getattr(flow, column) for column in ("provider", "redirect_to", "nonce", "link_user_id")}
    taken["challenge"] = (flow.code_challenge, flow.code_challenge_method) if flow.code_challenge else None
    db.session.delete(flow)
    return taken


def _finish(flow, profile):
    user_id = sign_in_user(flow["provider"], profile, flow["link_user_id"])
    if flow["challenge"]:
        sessions.check_may_sign_in(user_id)  # refused now, not at the exchange of a code
        started = pkce.start(flow["challenge"], METHOD, flow["provider"], user_id)
        return "code", pkce.issue_code(started, user_id)
    return "session", sessions.start_checked(user_id, METHOD)


OAUTH_ERRORS = {
    400: "invalid_request",
    401: "unauthorized_client",
    403: "access_denied",
    422: "access_denied",
    503: "temporarily_unavailable",
}


# Refusals of the user rather than of the request: `access_denied` whatever their status, as GoTrue.
DENIED = (Auth.SIGNUP_DISABLED, Auth.USER_BANNED, Auth.USER_INACTIVE, Auth.PROVIDER_EMAIL_NEEDS_VERIFICATION)


def error_redirect(target, failure):
    """`target` with GoTrue's error parameters, in the query and (for older clients) the fragment."""
    denied = "access_denied" if failure.error_code in DENIED else None
    values = {
        "error": failure.extra.get("error") or denied or OAUTH_ERRORS.get(failure.status, "server_error"),
        "error_code": failure.error_code,
        "error_description": failure.message,
    }
    encoded = urlencode(values, quote_via=quote)
    base, _, _ = target.partition("#")
    return f"{base}{'&' if '?' in base else '?'}{encoded}#{encoded}"


# --- the id_token grant


def sign_in_with_id_token(name, id_token, nonce, link_user_id=None):
    """POST /token?grant_type=id_token: a session for the user a provider's ID token names, or,
    with `link_user_id` (supabase-js's linkIdentity with a token), the token's identity linked to
    that signed-in user and a new session of theirs."""
    chosen = _provider(name, id_token=True)
    try:
        claims = providers.verify_id_token(chosen, id_token, providers.hashed_nonce(nonce))
    except providers.BadIdToken as exc:
        raise APIError(400, Auth.BAD_OAUTH_CALLBACK, f"Bad ID token: {exc}") from None
    except providers.ProviderError as exc:
        raise unavailable(chosen.name, exc) from None
    return _unless_raced(_sign_in_with_profile, chosen.name, providers.normal_profile(claims), link_user_id)


def _sign_in_with_profile(name, profile, link_user_id):
    return sessions.start_checked(sign_in_user(name, profile, link_user_id), METHOD)


class _Raced(Exception):
    """A concurrent first sign-in of the same provider account (a phone retrying, two tabs) created
    the user or the identity this one was about to create."""


def _unless_raced(work, *args):
    """`work(*args)` as one transaction, run once more if it lost the race of a first sign-in: the
    second run finds what the winner created and signs in to it, as the winner did."""
    try:
        return transactions.write(work, *args)
    except _Raced:
        pass
    try:
        return transactions.write(work, *args)
    except _Raced:
        raise APIError(409, Auth.CONFLICT, "Concurrent sign-ins of this account; try again") from None


# --- linking


def sign_in_user(name, profile, link_user_id=None):
    """The user_id the provider's account `profile` signs in (not committed)."""
    now = tokens.utcnow()
    identity = db.session.execute(
        select(Identity)
        .where(Identity.provider == name, Identity.provider_id == profile["sub"])
        .with_for_update()
    ).scalar_one_or_none()
    if identity is not None and not accounts.user_exists(identity.user_id):
        # Its user was deleted (by the application that shares the users table, say): the provider
        # account is nobody's now, and is treated as never seen.
        db.session.delete(identity)
        db.session.flush()
        identity = None
    if link_user_id is not None:
        if identity is not None and identity.user_id != link_user_id:
            raise APIError(422, Auth.IDENTITY_ALREADY_EXISTS, "Identity is already linked to another user")
        user_id = link_user_id
        _convert_if_anonymous(name, profile, user_id)
    elif identity is not None:
        user_id = identity.user_id
    else:
        user_id = _user_for_address(name, profile)
    if identity is None:
        identity = Identity(
            id=str(uuid.uuid4()), provider=name, provider_id=profile["sub"], user_id=user_id, created_at=now
        )
        db.session.add(identity)
    identity.email = profile["email"]
    identity.identity_data = profile
    identity.updated_at = identity.last_sign_in_at = now
    try:
        db.session.flush()
    except IntegrityError:
        raise _Raced() from None
    return user_id


def _convert_if_anonymous(name, profile, user_id):
    """An anonymous user linking a provider takes on its verified address and is anonymous no more,
    keeping their id (GoTrue's conversion by linkIdentity); an address taken by another user, or
    one the provider has not verified, refuses the link."""
    row = load_user(user_id)
    if row is None or not is_anonymous(row.email):
        return
    email = profile["email"]
    if not email or not profile["email_verified"] or anonymous.reserved(email):
        raise APIError(
            422,
            Auth.PROVIDER_EMAIL_NEEDS_VERIFICATION,
            f"Unverified email with {name}. Verify the email with {name} in order to sign in",
        )
    found = accounts.find_credentials(email)
    if found is not None and found.user_id != user_id:
        raise accounts.email_exists()
    accounts.change_user(user_id, {"email": email})
    upsert(Profile.__table__, {"user_id": user_id, "confirmed_at": tokens.utcnow()}, ["user_id"])
    anonymous.converted(user_id, email)


def _user_for_address(name, profile):
    email = profile["email"]
    if not email:
        raise APIError(
            422, Auth.PROVIDER_EMAIL_NEEDS_VERIFICATION, "Error getting user email from external provider"
        )
    if not profile["email_verified"]:
        raise APIError(
            422,
            Auth.PROVIDER_EMAIL_NEEDS_VERIFICATION,
            f"Unverified email with {name}. Verify the email with {name} in order to sign in",
        )
    found = accounts.find_credentials(email)
    if found is not None:
        unconfirmed = db.session.execute(
            select(Profile.unconfirmed).where(Profile.user_id == found.user_id)
        ).scalar()
        if unconfirmed:
            # Whoever signed up with this address never proved it; the provider just did. Their
            # password is not the owner's: it stops working.
            accounts.set_password_hash(found.user_id, unusable_hash())
        upsert(
            Profile.__table__,
            {"user_id": found.user_id, "unconfirmed": None, "confirmed_at": tokens.utcnow()},
            ["user_id"],
        )
        return found.user_id
    if setting("DISABLE_SIGNUP"):
        raise APIError(422, Auth.SIGNUP_DISABLED, "Signups not allowed for this instance")
    data = {key: profile[key] for key in ("full_name", "avatar_url") if profile.get(key)}
    try:
        return signups.create_user(email, None, data, hashed=unusable_hash(), provider=name)
    except APIError as failure:
        if failure.error_code == Auth.USER_ALREADY_EXISTS:  # no user had the address a moment ago
            raise _Raced() from None
        raise


# --- a user's identities


@transactional
def unlink(who, identity_id):
    """DELETE /user/identities/{id}: unless it is the user's last way to sign in."""
    identity = db.session.execute(
        select(Identity).where(Identity.id == identity_id, Identity.user_id == who.user_id).with_for_update()
    ).scalar_one_or_none()
    if identity is None:
        raise APIError(422, Auth.IDENTITY_NOT_FOUND, "Identity doesn't exist")
    row = load_user(who.user_id)
    ways = len(identities(row))
    if ways <= 1:
        raise APIError(
            422, Auth.SINGLE_IDENTITY_NOT_DELETABLE, "User must have at least 1 identity after unlinking"
        )
    db.session.delete(identity)
    return user_object(load_user(who.user_id))
