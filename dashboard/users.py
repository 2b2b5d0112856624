"""The Users pages' work, through the admin API's services (auth.administration, auth.emails,
auth.mfa, auth.passkeys), each change with its audit entry."""

from auth import administration, audit, emails, mfa, passkeys, sessions
from dashboard.actions import perform, read, write  # noqa: F401 (read: the pages' reads)
from models.auth import Session

COMPUTED_APP_METADATA = ("provider", "providers")  # made from identities, never stored


def page(query, order, number, per_page):
    return read(administration.admin_list_users, number, per_page, query, order)


def details(user_id):
    """A user's object, factors, sessions and passkeys."""

    def gather():
        user = administration.admin_get_user(user_id)
        found = (mfa.admin_list_factors(user_id), administration.admin_list_sessions(user_id))
        return user, *found, passkeys.admin_list(user_id)

    return read(gather)


def replacement(stored, wanted):
    """The merge (keys set to null removed) that turns `stored` into `wanted`."""
    return {**dict.fromkeys(set(stored) - set(wanted)), **wanted}


def edit_metadata(user_id, user_metadata, app_metadata):
    """Replace the user's metadata with what the admin wrote (the services merge: keys the admin
    removed are sent as null)."""

    def change():
        user = administration.admin_get_user(user_id)
        stored_app = {k: v for k, v in user["app_metadata"].items() if k not in COMPUTED_APP_METADATA}
        wanted_app = {k: v for k, v in app_metadata.items() if k not in COMPUTED_APP_METADATA}
        fields = {
            "user_metadata": replacement(user["user_metadata"], user_metadata),
            "app_metadata": replacement(stored_app, wanted_app),
        }
        return administration.admin_update_user(user_id, fields)

    return perform("metadata_change", audit.user_target(user_id), write, change)


def create(fields):
    user = perform("user_created", fields["email"], administration.admin_create_user, fields)
    return user


def invite(email):
    return perform("user_invited", email, emails.invite, email, {}, None)


def send_recovery(user_id):
    email = details(user_id)[0]["email"]
    perform("recovery_sent", audit.user_target(user_id, email), emails.recover, email, None)


def send_magic_link(user_id):
    email = details(user_id)[0]["email"]
    perform("magic_link_sent", audit.user_target(user_id, email), emails.magic_link, email, False, {}, None)


def update(user_id, fields):
    """A ban, or its end: the service records it."""
    return perform(None, None, administration.admin_update_user, user_id, fields)


def end_sessions(user_id):
    perform("sessions_ended", audit.user_target(user_id), write, sessions.end, Session.user_id == user_id)


def remove_factor(user_id, factor_id):
    return perform(None, None, mfa.admin_delete_factor, user_id, factor_id)


def delete(user_id):
    perform(None, None, administration.admin_delete_user, user_id)
