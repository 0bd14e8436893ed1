"""AWS credentials, region and endpoint for Bedrock, found the way the AWS tools find them, and
SigV4 signing with botocore's signer (the optional extra `tether[bedrock]`).

Credentials, first that applies: the `lc-bedrock` record's keys (`tether connect bedrock
--access-key --secret-key`); its `--profile`; `AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY`
(+ `AWS_SESSION_TOKEN`); then botocore's own chain under `AWS_PROFILE` (shared credentials and
config files, SSO, `credential_process`, container and instance roles). Region: the record's,
`AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's `region`. Endpoint: the record's base URL,
`AWS_ENDPOINT_URL_BEDROCK_RUNTIME`, `AWS_ENDPOINT_URL`, else `bedrock-runtime.<region>`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tether.errors import ProviderError, UsageError

SERVICE = "bedrock"  # the SigV4 signing name of bedrock-runtime
_INSTALL = (
    "Amazon Bedrock needs botocore for request signing: pip install 'tether[bedrock]' (or botocore)"
)


@dataclass(frozen=True, slots=True)
class AwsAccess:
    credentials: Any  # botocore Credentials (refreshable ones renew themselves when signing)
    region: str
    base_url: str
    service: str = SERVICE


def _botocore() -> None:
    try:
        import botocore  # noqa: F401
    except ImportError:
        raise UsageError(_INSTALL) from None


def resolve_aws_access(record: Mapping[str, Any] | None, env: Mapping[str, str]) -> AwsAccess:
    _botocore()
    from botocore.credentials import Credentials

    record = record or {}
    secret = (record.get("auth") or {}).get("key") if isinstance(record.get("auth"), dict) else None
    session: Any = None
    credentials: Any = None
    where = ""
    if record.get("access_key") and secret and secret != "profile":
        credentials, where = Credentials(record["access_key"], secret), "the stored access key"
    elif record.get("profile"):
        session = _session(str(record["profile"]), env)
        credentials, where = session.get_credentials(), f"profile {record['profile']!r}"
    elif env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        credentials = Credentials(
            env["AWS_ACCESS_KEY_ID"],
            env["AWS_SECRET_ACCESS_KEY"],
            env.get("AWS_SESSION_TOKEN") or None,
        )
        where = "AWS_ACCESS_KEY_ID"
    else:
        profile = env.get("AWS_PROFILE") or env.get("AWS_DEFAULT_PROFILE")
        session = _session(profile, env)
        credentials = session.get_credentials()
        where = f"profile {profile!r}" if profile else "the default AWS credential chain"
    if credentials is None:
        raise UsageError(
            f"no AWS credentials for bedrock from {where}: run `tether connect bedrock "
            "--access-key ID --secret-key KEY --region REGION` (or --profile NAME), or set "
            "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE"
        )
    region = (
        record.get("region")
        or env.get("AWS_REGION")
        or env.get("AWS_DEFAULT_REGION")
        or (session.get_config_variable("region") if session is not None else None)
    )
    if not region:
        raise UsageError(
            "bedrock needs an AWS region: pass --region to `tether connect bedrock`, set "
            "AWS_REGION, or give the profile a region in ~/.aws/config"
        )
    base_url = (
        record.get("base_url")
        or env.get("AWS_ENDPOINT_URL_BEDROCK_RUNTIME")
        or env.get("AWS_ENDPOINT_URL")
        or f"https://bedrock-runtime.{region}.amazonaws.com"
    )
    return AwsAccess(credentials, str(region), str(base_url).rstrip("/"))


def _session(profile: str | None, env: Mapping[str, str]) -> Any:
    """A botocore session reading the files `env` names (botocore itself reads os.environ)."""
    import botocore.session
    from botocore.exceptions import ProfileNotFound

    session = botocore.session.Session()
    for variable, name in (
        ("credentials_file", "AWS_SHARED_CREDENTIALS_FILE"),
        ("config_file", "AWS_CONFIG_FILE"),
    ):
        if env.get(name):
            session.set_config_variable(variable, env[name])
    if profile:
        session.set_config_variable("profile", profile)
        try:
            session.get_scoped_config()
        except ProfileNotFound:
            raise UsageError(
                f"AWS profile {profile!r} is not in ~/.aws/credentials or ~/.aws/config "
                "(or the files AWS_SHARED_CREDENTIALS_FILE / AWS_CONFIG_FILE name)"
            ) from None
    return session


def sign_request(
    access: AwsAccess, method: str, url: str, headers: Mapping[str, str], body: bytes
) -> dict[str, str]:
    """`headers` plus botocore's SigV4 `authorization`, `x-amz-date` (and security token)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.exceptions import BotoCoreError

    request = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
    try:
        frozen = access.credentials.get_frozen_credentials()
        SigV4Auth(frozen, access.service, access.region).add_auth(request)
    except BotoCoreError as exc:  # e.g. an SSO token that expired: say so, do not send unsigned
        raise ProviderError(f"cannot sign the bedrock request: {exc}", retryable=False) from None
    return {name.lower(): str(value) for name, value in request.headers.items()}
