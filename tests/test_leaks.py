"""Secrets in shapes the scrubber once missed, each recorded as a tool's argument and result (and,
for a command, as its argv list) and found in no file of the session; and values of names that
sound like credentials but are not (a directory named PWD), kept as they are."""

from __future__ import annotations

import random
import shlex
import string
from pathlib import Path

import pytest

import forkpoint
from forkpoint.redact import scrub_argv, scrub_json, scrub_text
from tests.test_security import leaks

_rng = random.Random(179)
_ALNUM = string.ascii_letters + string.digits


def _r(n: int) -> str:
    return "".join(_rng.choice(_ALNUM) for _ in range(n)) + "7"


#: name -> (secret, the text that carries it, "{s}" where it goes)
LEAKS: dict[str, tuple[str, str]] = {
    "query_token_code": (_r(31), "query_token = '{s}'"),
    "bare_token_code": (_r(23), 'token = "{s}"'),
    "token_yaml": (_r(23), "TOKEN: {s}\n"),
    "aws_configure": (_r(39), "aws configure set aws_secret_access_key {s}"),
    "aws_configure_profile": (_r(39), "aws configure set profile.ci.aws_secret_access_key {s}"),
    "aws_session_token": (_r(99), "aws configure set aws_session_token {s} --profile ci"),
    "gh_secret_body": (_r(19), "gh secret set DEPLOY_KEY --body {s}"),
    "gh_secret_b": (_r(19), "gh secret set DEPLOY_KEY --repo org/app -b '{s}'"),
    "gh_secret_joined": (_r(19), "gh secret set DEPLOY_KEY --body={s}"),
    "htpasswd": (_r(15), "htpasswd -b /etc/nginx/.htpasswd admin {s}"),
    "htpasswd_flags": (_r(15), "htpasswd -c -B -C 12 -b /etc/nginx/.htpasswd admin '{s}' && nginx -s reload"),
    "htpasswd_print": (_r(15), "htpasswd -nbB admin {s} | tee -a users"),
    "openssl_pass": (_r(15), "openssl enc -aes-256-cbc -in a -out b -pass pass:{s}"),
    "openssl_passout": (_r(15), "openssl pkcs12 -export -in c.pem -passout 'pass:{s}' -out c.p12"),
    # (openssl 3 reads -passin=VALUE and --passin VALUE as -passin VALUE)
    "openssl_passin_equals": (_r(15), "openssl rsa -in k.pem -passin=pass:{s} --passout pass:{s} -aes256"),
    # (openssl enc's -k PASSWORD and -K KEY, of enc or a cipher's own command)
    "openssl_k": (_r(15), "openssl enc -aes-256-cbc -salt -in a.tar -out a.tar.enc -k {s}"),
    "openssl_cipher_k": (_r(7) + " " + _r(7), "openssl aes-256-cbc -d -in a.tar.enc -out a.tar -k '{s}'"),
    "openssl_key_hex": (
        "5f4dcc3b5aa765d61d8327deb882cf99",
        "openssl enc -aes-128-cbc -K {s} -iv 000102030405060708090a0b0c0d0e0f -in f -out f.enc",
    ),
    # (an option named for a password, not openssl's: its value whatever it holds)
    "password_option": (_r(15), "deploy --password {s} --host 127.0.0.1"),
    "htpasswd_cost": (_r(15), "htpasswd -bC 12 /etc/nginx/.htpasswd admin {s}"),
    "mysql": (_r(15), "mysql -h 127.0.0.1 -u root -p{s} app"),
    "curl_user": (_r(15), "curl -u deploy:{s} https://127.0.0.1/v1"),
    "sshpass": (_r(15), "sshpass -p {s} ssh deploy@127.0.0.1 uptime"),
    # (a client after a wrapper that runs it: sudo's, env's, timeout's, nice's, nohup's, xargs's)
    "sudo_docker_login": (_r(15), "sudo docker login -u ci -p {s} 127.0.0.1:5000"),
    "env_htpasswd": (_r(15), "env LC_ALL=C htpasswd -b /etc/nginx/.htpasswd admin {s}"),
    "timeout_mysql": (_r(15), "timeout 30 mysql -h 127.0.0.1 -u root -p{s} app"),
    "nice_sshpass": (_r(15), "nice -n 5 sshpass -p {s} ssh deploy@127.0.0.1 uptime"),
    "sudo_redis_cli": (_r(15), "sudo -u redis redis-cli -a {s} ping"),
    "nohup_gh_secret": (_r(19), "nohup gh secret set DEPLOY_KEY --body {s}"),
    "xargs_curl": (_r(15), "xargs -n 1 curl -u deploy:{s}"),
    "sudo_aws_configure": (_r(39), "sudo -E aws configure set aws_secret_access_key {s}"),
    "wrappers_chained": (_r(15), "sudo -Eu ci env X=1 timeout -s KILL 5 docker login -u ci -p {s}"),
    "url_hash": (_r(7) + "#" + _r(7), "postgres://app:{s}@127.0.0.1:5432/prod"),
    "url_slashes": (_r(7) + "//" + _r(7), "https://app:{s}@127.0.0.1/x"),
    "xml_password": (_r(15), "<server>\n  <username>ci</username>\n  <password>{s}</password>\n</server>"),
    "xml_secret": (_r(15), "<client><secret>{s}</secret></client>"),
    "json_pass": (_r(15), '{{"user": "ada", "pass": "{s}"}}'),
    "json_pwd": (_r(15), '{{"uid": "sa", "pwd": "{s}"}}'),
    # (under a name whose credential word is pass alone, a plain lower-case word too: a default
    # password, changeme, postgres, is one)
    "smtp_pass": (_r(15), "SMTP_PASS={s}\n"),
    "json_db_pass": ("hunter" + _r(3), '{{"db_pass": "{s}"}}'),
    "db_pass_word": ("changeme", "DB_PASS={s}\n"),
    "json_pass_word": ("letmein", '{{"user": "ada", "pass": "{s}"}}'),
    "json_passwd": (_r(15), '{{"user": "ada", "passwd": "{s}"}}'),
    "json_secret_key": (_r(15), '{{"access_key": "ada", "secret_key": "{s}"}}'),
    "multiline_env": (_r(15) + "\n" + _r(15), 'PASSWORD="{s}"\nDEBUG=1\n'),
    "triple_quoted": (_r(15) + "\n" + _r(15), 'db_password = """{s}"""\nDEBUG = 1\n'),
    "triple_quoted_token": (_r(23), 'token = """{s}"""'),
    "triple_quoted_dict": (_r(15) + "\n" + _r(15), 'config = {{"password": """{s}""", "user": "ci"}}'),
    "triple_quoted_indented": (
        _r(15) + "\n    " + _r(15),
        "class Config:\n    api_token = r'''\n    {s}\n    '''\n    debug = True\n",
    ),
    # (annotated: Python's NAME: TYPE = …, TypeScript's const NAME: string = …)
    "annotated_triple": (_r(15), 'password: str = """{s}"""'),
    "annotated_triple_lines": (_r(15) + "\n" + _r(15), 'db_password: Final[str] = """{s}"""\nDEBUG = 1\n'),
    "annotated_quoted": (_r(15), 'api_key: str | None = "{s}"'),
    "annotated_token": (_r(23), "token: str = '{s}'"),
    "annotated_typescript": (_r(15), 'const dbPassword: string = "{s}";'),
    "terraform": (
        _r(15),
        'variable "db_password" {{\n  type      = string\n  sensitive = true\n  default   = "{s}"\n}}\n',
    ),
}
SECRETS = {name: secret for name, (secret, _) in LEAKS.items()}
#: Each line of each secret (a multi-line value kept its second line in the clear).
LINES = {f"{name} line {i}": line for name, s in SECRETS.items() for i, line in enumerate(s.split("\n"))}
TEXTS = {
    name: ctx.replace("{{", "{").replace("}}", "}").replace("{s}", secret)
    for name, (secret, ctx) in LEAKS.items()
}
#: Commands whose argv list (a tool's) is read for the password too.
COMMANDS = [
    "aws_configure",
    "aws_configure_profile",
    "aws_session_token",
    "gh_secret_body",
    "gh_secret_b",
    "gh_secret_joined",
    "htpasswd",
    "htpasswd_flags",
    "htpasswd_print",
    "openssl_pass",
    "openssl_passout",
    "openssl_passin_equals",
    "openssl_k",
    "openssl_cipher_k",
    "openssl_key_hex",
    "password_option",
    "htpasswd_cost",
    "mysql",
    "curl_user",
    "sshpass",
    "sudo_docker_login",
    "env_htpasswd",
    "timeout_mysql",
    "nice_sshpass",
    "sudo_redis_cli",
    "nohup_gh_secret",
    "xargs_curl",
    "sudo_aws_configure",
    "wrappers_chained",
]

#: Text that looks like the shapes above and holds no secret: a directory (the shell's PWD and
#: OLDPWD, and names ending in _PWD holding a path), a port and a path with an "@" in it, a
#: build's property, a tokenizer's stop token, code between quotes of literals on two lines.
KEPT = [
    "OLD_PWD=/home/ada/project",
    "OLDPWD=/home/ada/project",
    "export PWD=/home/ada/project",
    "BUILD_PWD=~/src/app",
    '{"PWD": "/home/ada/project", "OLDPWD": "/tmp"}',
    "http://127.0.0.1:8080/users/ada@localhost",
    "<password>${env.DEPLOY_PASSWORD}</password>",
    'stop_token = "<|im_end|>"',
    "token = 'abcdefghijklmnopqrstuvwxyz'",
    'log("password: " + pw)\nx="y"\n',
    # (a docstring is assigned to no name; a literal that ends in a credential's name is not one
    # that opens: the code after it up to the next literal is no value)
    'def login(password):\n    """Log in.\n\n    password = the user\'s\n    """\n',
    'print("""Set your token = """)\nx = 1\nhelp = """\nUsage\n"""\n',
    'USAGE = """Set PASSWORD = """\nNEXT = """\nmore\n"""\n',
    # (annotated: an empty default, no literal, a tokenizer's special token)
    'def connect(host: str, password: str = "") -> None:',
    "password: str | None = None",
    'eos_token: str = "<|endoftext|>"',
    # (a .NET assembly's public key token, a hash of its public key; a pagination cursor)
    "System.Text.Json, Version=8.0.0.0, Culture=neutral, PublicKeyToken=cc7b13ffcd2ddd51",
    '<assemblyIdentity name="Microsoft.VC90.CRT" version="9.0.21022.8" publicKeyToken="1fc8b3b9a1e18e3b"/>',
    'nextPageToken = "CgNhYmMSBGRlZjEyMzQ1Njc4OTA"',
    # (openssl's -kfile names a file; curl's -k, after another command, is a switch)
    "openssl enc -aes-256-cbc -kfile /run/secrets/backup.key -in a.tar -out a.tar.enc",
    "openssl s_client -connect 127.0.0.1:443 </dev/null; curl -k https://127.0.0.1/health",
]


@pytest.mark.parametrize("name", list(LEAKS))
def test_a_secret_of_each_shape_is_scrubbed_from_text(name: str) -> None:
    out = scrub_text(TEXTS[name])
    assert not any(line in out for line in SECRETS[name].split("\n")), out
    assert "[REDACTED:" in out and scrub_text(out) == out


@pytest.mark.parametrize("name", COMMANDS)
def test_a_secret_on_a_command_line_is_scrubbed_from_its_argv(name: str) -> None:
    argv = shlex.split(TEXTS[name])
    out = scrub_argv(argv)
    assert not any(SECRETS[name] in item for item in out), out
    # (only the items that hold it change, and a second scrub changes nothing: a replay's match key)
    assert [a for a, b in zip(argv, out, strict=True) if a != b] == [a for a in argv if SECRETS[name] in a]
    assert scrub_argv(out) == out


@pytest.mark.parametrize(
    "argv",
    [
        # (sudo's -p is its prompt; docker reads the password from stdin)
        ["sudo", "-p", "Password for %u:", "docker", "login", "-u", "ci", "--password-stdin"],
        # (mysql -p DB asks for DB's password; ssh's -p is a port, after the command sshpass runs)
        ["sudo", "-u", "ci", "nice", "-n", "5", "mysql", "-p", "app"],
        ["timeout", "5", "sshpass", "-f", "pw.txt", "ssh", "-p", "2222", "deploy@127.0.0.1"],
        ["env", "-u", "HOME", "X=1", "docker", "run", "-p", "8080:80", "nginx"],
        # (openssl's -kfile names a file: its value no password, as -k's is)
        ["sudo", "openssl", "enc", "-d", "-aes-256-cbc", "-kfile", "/run/secrets/backup.key", "-in", "a"],
    ],
)
def test_a_wrappers_options_are_not_its_commands(argv: list[str]) -> None:
    """A client after a wrapper is read as at the list's start, its options only: the wrapper's own
    (sudo -p PROMPT) and those of the command the client runs are no password."""
    assert scrub_argv(argv) == argv


@forkpoint.tool
def echo(text: str) -> str:
    return text


@forkpoint.tool
def run(argv: list[str]) -> list[str]:
    return argv


def test_no_secret_of_these_shapes_reaches_the_session(tmp_path: Path) -> None:
    with forkpoint.record(store=tmp_path) as rec:
        for name, text in TEXTS.items():
            assert echo(text) == text  # (recording never changes what the program gets)
            if name in COMMANDS:
                assert run(shlex.split(text)) == shlex.split(text)
    assert rec.session_path.is_dir()
    assert leaks(tmp_path, LINES) == []
    with forkpoint.replay(rec.session_path) as rp:
        for name, text in TEXTS.items():
            assert echo(text) == scrub_text(text)
            if name in COMMANDS:
                assert run(shlex.split(text)) == scrub_argv(shlex.split(text))
    assert rp.report()["divergence"] is None and rp.report()["matched"] == rp.report()["recorded"]


@pytest.mark.parametrize("text", KEPT)
def test_text_like_a_secret_is_kept(text: str) -> None:
    assert scrub_text(text) == text


def test_a_directory_named_pwd_in_json_data_is_kept() -> None:
    env = {"PWD": "/home/ada/project", "OLDPWD": "/tmp", "pwd": "~/src"}
    assert scrub_json(env) == env


def test_a_public_key_token_in_json_data_is_kept() -> None:
    """A .NET assembly's public key token is a hash of its public key, in every reference to it:
    kept; a password under ``pass``, a plain word too (a filter's ``"pass": "bandpass"`` is replaced
    with it: a default password is a word as often), is replaced."""
    data = {"btype": "lowpass", "publicKeyToken": "b77a5c561934e089"}
    assert scrub_json(data) == data
    secrets = {"pass": "S3cr3t-Xq9vT2mLp8", "on_pass": "hunter22", "DB_PASS": "changeme"}
    scrubbed = scrub_json(secrets)
    assert all(scrubbed[k].startswith("[REDACTED:secret-field:") for k in ("pass", "on_pass", "DB_PASS"))


def test_credentials_under_pass_pwd_and_secret_key_in_json_data_are_scrubbed() -> None:
    data = {
        "db": {
            "pass": SECRETS["json_pass"],
            "pwd": SECRETS["json_pwd"],
            "secret_key": SECRETS["json_secret_key"],
        }
    }
    out = scrub_json(data)
    assert all(v.startswith("[REDACTED:secret-field:") for v in out["db"].values()), out
