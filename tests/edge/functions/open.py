"""verify_jwt = false (config.toml): a webhook anyone may call."""


def handler(request, caller):
    return {"role": caller.role, "body": request.text()}
