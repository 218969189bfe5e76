"""The secrets corpus: secret shapes that must never reach any output, and look-alikes that must.

Each Shape is one way a secret shows up in what triage reads (a log line, an environment variable,
a config file, a command line) with the secret values in it; the tests put every shape through every
output channel and check that no value survives, and that every look-alike (commit hashes, UUIDs,
NCCL ids, ordinary diagnostics) comes out unchanged. The values are fake but have the real formats;
they are assembled from parts so that secret scanners do not flag this file.
"""

from __future__ import annotations

from typing import NamedTuple


class Shape(NamedTuple):
    name: str
    text: str  # a line as it appears in a log, a command line or a config
    secrets: tuple[str, ...]  # what must not appear in any output
    variable: str = ""  # for variable-name shapes: the environment variable that holds it


def _j(*parts: str) -> str:
    return "".join(parts)


HF = _j("hf_", "aB3dE5fG7hJ9kL1mN3pQ5rS7tU")
ORG = _j("api_org_", "Zq8Wx7Yv6Ut5Sr4Qp3On2Ml")
GHP = _j("ghp_", "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6")
GHO = _j("gho_", "9z8Y7x6W5v4U3t2S1r0Q9p8O7n6M5l4K")
GHPAT = _j("github_pat_", "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwx")
SKP = _j("sk-proj-", "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Jh1")
SKA = _j("sk-ant-api03-", "AbCdEfGhIjKlMnOpQrStUvWx-yz0123")
STRIPE = _j("sk_live_", "51HqLyjWDarjtT1zdp7dcXk")
STRIPE_R = _j("rk_test_", "4eC39HqLyjWDarjtT1zdp7dc")
SLACK_B = _j("xoxb-", "2640218374-9172648395-QwErTyUiOpAsDfGh")
SLACK_P = _j("xoxp-", "1234567890-0987654321-AbCdEfGhIj")
SLACK_APP = _j("xapp-", "1-A01BCDEFGHI-1234567890123-abcdef0123456789")
SLACK_HOOK = _j("https://hooks.slack.com/services/", "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX")
GLPAT = _j("glpat-", "xYz123AbC456dEf789gH")
AKIA = _j("AKIA", "IOSFODNN7EXAMPLE")
ASIA = _j("ASIA", "Y34FZKBOKMUTVV7A")
AWS_SECRET = _j("wJalrXUtnFEMI/K7MDENG/", "bPxRfiCYEXAMPLEKEY")
AIZA = _j("AIza", "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY")
YA29 = _j("ya29.", "a0AfH6SMBx-abcdefGHIJKLmnopQRSTuvw")
GREFRESH = _j("1//0", "4dX9yZ8wV7uT6sR5qP4oN3mL2kJ1iH0gF")
JWT = _j(
    "eyJhbGciOiJIUzI1NiJ9.", "eyJzdWIiOiIxMjM0NTY3ODkwIn0.", "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
)
NPM = _j("npm_", "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8")
PYPI = _j("pypi-", "AgEIcHlwaS5vcmcCJDU3ZmE2ZjE1LWJiNzEtNGQ2Yi05NDM3")
DAPI = _j("dapi", "0123456789abcdef0123456789abcdef")
SENDGRID = _j("SG.", "ngeVfQFYQlKU0ufo8x5d1A.", "TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr")
DISCORD = _j(
    "https://discord.com/api/webhooks/", "123456789012345678/", "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
)
WANDB_NEW = _j("wandb_v1_", "AbCdEfGhIjKlMnOpQrStUvWx0123")
WANDB_HEX = _j("0123456789abcdef", "0123456789abcdef", "01234567")
VAULT = _j("hvs.", "CAESIJLgFmcSk8e6ZxS0MvGAbCdEf")
SHOPIFY = _j("shpat_", "0123456789abcdef0123456789abcdef")
DIGITALOCEAN = _j("dop_v1_", "0123456789abcdef" * 4)
PASSWORD = "Tr0ub4dor&3x"
PEM_BODY = _j("MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7", "VJTUt9Us8cKjMzEfYyjiWA4R4")
SSH_BODY = _j("b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW", "QyNTUxOQAAACB")
SA_KEY_ID = _j("3f4a9c1b2d", "8e7f6a5b4c3d2e1f0a9b8c7d")
SENTRY_KEY = _j("a1b2c3d4e5f6a7b8", "c9d0e1f2a3b4c5d6")
COOKIE = _j("s%3A", "Xk9mZ2pQ7vLt.eN4rB8wQ1yT5uI0oP3")
SAS_SIG = _j("vK3nZ8%2BqW4", "tE7yU1iO5pA9sD2fG6hJ0kL%3D")
AMZ_SIG = _j("b4a3f2e1d0c9", "b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7")

SHAPES: tuple[Shape, ...] = (
    Shape("hugging face token", f"huggingface_hub login with {HF}", (HF,)),
    Shape("hugging face org token", f"uploading as {ORG}", (ORG,)),
    Shape("github classic token", f"git push https://x:{GHP}@github.com/o/r.git", (GHP,)),
    Shape("github oauth token", f"token {GHO} expired", (GHO,)),
    Shape("github fine-grained token", f"using {GHPAT}", (GHPAT,)),
    Shape("openai project key", f"openai.AuthenticationError for {SKP}", (SKP,)),
    Shape("anthropic key", f"key={SKA}", (SKA,)),
    Shape("stripe live key", f"stripe.api_key = '{STRIPE}'", (STRIPE,)),
    Shape("stripe restricted key", f"charging with {STRIPE_R}", (STRIPE_R,)),
    Shape("slack bot token", f"slack client {SLACK_B}", (SLACK_B,)),
    Shape("slack user token", f"posting as {SLACK_P}", (SLACK_P,)),
    Shape("slack app token", f"socket mode {SLACK_APP}", (SLACK_APP,)),
    Shape("slack webhook", f"notify {SLACK_HOOK} failed", (SLACK_HOOK.split("services/")[1],)),
    Shape("gitlab token", f"registry login {GLPAT}", (GLPAT,)),
    Shape("aws access key id", f"InvalidAccessKeyId: {AKIA}", (AKIA,)),
    Shape("aws session key id", f"credentials {ASIA} from sts", (ASIA,)),
    Shape("bare aws secret key", f"aws configure set x {AWS_SECRET}", (AWS_SECRET,)),
    Shape("aws credentials file", f"aws_secret_access_key = {AWS_SECRET}", (AWS_SECRET,)),
    Shape("google api key", f"maps?key={AIZA}&q=x", (AIZA,)),
    Shape("google oauth token", f"Authorization header {YA29}", (YA29,)),
    Shape("google refresh token", f"refresh_token {GREFRESH}", (GREFRESH,)),
    Shape("jwt", f"401 for token {JWT}", (JWT,)),
    Shape("npm token", f"//registry.npmjs.org/:_authToken={NPM}", (NPM,)),
    Shape("pypi token", f"twine upload -u __token__ -p {PYPI}", (PYPI,)),
    Shape("databricks token", f"DATABRICKS host token {DAPI}", (DAPI,)),
    Shape("sendgrid key", f"mail via {SENDGRID}", (SENDGRID,)),
    Shape("discord webhook", f"post {DISCORD}", (DISCORD.rsplit("/", 1)[1],)),
    Shape("wandb new key", f"wandb: key {WANDB_NEW}", (WANDB_NEW,)),
    Shape("wandb key in a variable", f"WANDB_API_KEY={WANDB_HEX}", (WANDB_HEX,)),
    Shape("wandb login", f"$ wandb login {WANDB_HEX}", (WANDB_HEX,)),
    Shape("wandb key flag", f"python train.py --wandb_api_key {WANDB_HEX} --epochs 3", (WANDB_HEX,)),
    Shape("vault token", f"VAULT said {VAULT}", (VAULT,)),
    Shape("shopify token", f"shop {SHOPIFY}", (SHOPIFY,)),
    Shape("digitalocean token", f"doctl {DIGITALOCEAN}", (DIGITALOCEAN,)),
    Shape("url password", f"cloning https://alice:{PASSWORD}@git.example.com/repo.git", (PASSWORD,)),
    Shape("url password with @", "mirror https://bob:p@ss-w0rd-9@mirror.example.com/x", ("p@ss-w0rd-9",)),
    Shape("url password with /", "s3 proxy http://carol:pa/ss9word@10.0.0.5:3128/", ("pa/ss9word",)),
    Shape("redis password", "redis://:r3disPassw0rd@cache.internal:6379/0", ("r3disPassw0rd",)),
    Shape("database url", "DATABASE_URL=postgres://app:pgS3cretPw@db:5432/train", ("pgS3cretPw",)),
    Shape(
        "sentry dsn", f"sentry_sdk.init('https://{SENTRY_KEY}@o12345.ingest.sentry.io/678')", (SENTRY_KEY,)
    ),
    Shape(
        "token in a query", "GET https://api.example.com/v1/x?a=b&token=QwErTy123456789", ("QwErTy123456789",)
    ),
    Shape("access token in a query", "https://h/cb?access_token=AbC123dEf456&state=1", ("AbC123dEf456",)),
    Shape(
        "azure sas signature",
        f"https://acct.blob.core.windows.net/c/b?sv=2022-11-02&se=2030-01-01&sp=r&sig={SAS_SIG}",
        (SAS_SIG,),
    ),
    Shape(
        "s3 presigned url",
        f"https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIDEXAMPLE%2F20240101&X-Amz-Signature={AMZ_SIG}",
        (AMZ_SIG, "AKIDEXAMPLE"),
    ),
    Shape(
        "pem private key",
        f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n{PEM_BODY[::-1]}\n-----END RSA PRIVATE KEY-----",
        (PEM_BODY, PEM_BODY[::-1]),
    ),
    Shape(
        "openssh private key",
        f"-----BEGIN OPENSSH PRIVATE KEY-----\n{SSH_BODY}\n-----END OPENSSH PRIVATE KEY-----",
        (SSH_BODY,),
    ),
    Shape("cut pem key", f"key: -----BEGIN EC PRIVATE KEY-----\n{PEM_BODY}", (PEM_BODY,)),
    Shape(
        "gcp service account json",
        '{"type": "service_account", "private_key_id": "' + SA_KEY_ID + '", "private_key": '
        '"-----BEGIN PRIVATE KEY-----\\n' + PEM_BODY + '\\n-----END PRIVATE KEY-----\\n"}',
        (SA_KEY_ID, PEM_BODY),
    ),
    Shape("bearer header", "Authorization: Bearer abcDEF123456ghiJKL789", ("abcDEF123456ghiJKL789",)),
    Shape("basic header", "authorization: Basic YWxpY2U6c2VjcmV0cGFzcw==", ("YWxpY2U6c2VjcmV0cGFzcw==",)),
    Shape("cookie header", f"Cookie: connect.sid={COOKIE}; theme=dark", (COOKIE,)),
    Shape("set-cookie header", "Set-Cookie: session=9f8e7d6c5b4a; HttpOnly", ("9f8e7d6c5b4a",)),
    Shape("api key header", "X-Api-Key: 7c3e9a1f5b2d8e4a", ("7c3e9a1f5b2d8e4a",)),
    Shape("password flag", f"mysqldump --password {PASSWORD} db", (PASSWORD,)),
    Shape("quoted password flag", '--password="horse battery staple 42"', ("horse battery staple 42",)),
    Shape("mysql -p", f"mysql -u root -p{PASSWORD} -h db", (PASSWORD,)),
    Shape("api key flag", "client --api-key 5f4dcc3b5aa765d61d83 --verbose", ("5f4dcc3b5aa765d61d83",)),
    Shape("token flag", "huggingface-cli login --token " + HF, (HF,)),
    Shape("hf token flag", "accelerate launch --hf-token=Tok3nValue99 train.py", ("Tok3nValue99",)),
    Shape("curl basic auth", "curl -u deploy:Sup3rS3cret! https://ci/api", ("Sup3rS3cret!",)),
    Shape(
        "quoted multi-word password",
        'DB_PASSWORD="correct horse battery staple"',
        ("correct horse battery staple",),
    ),
    Shape("json password", '{"user": "ml", "password": "p@ss w0rd!", "port": 5432}', ("p@ss w0rd!",)),
    Shape("yaml password", "  password: yamlS3cret", ("yamlS3cret",)),
    Shape(
        "kaggle json",
        '{"username":"alice","key":"0123abcd4567ef890123abcd4567ef89"}',
        ("0123abcd4567ef890123abcd4567ef89",),
    ),
    Shape("ini secret", "client_secret = GOCSPX-AbCdEfGhIjKlMnOp", ("GOCSPX-AbCdEfGhIjKlMnOp",)),
    # Variable names that say secret, whatever the value looks like.
    Shape(
        "api keys variable", "OPENAI_API_KEYS=plainvalue1,plainvalue2", ("plainvalue1",), "OPENAI_API_KEYS"
    ),
    Shape(
        "proxy authorization variable",
        "HTTPS_PROXY_AUTHORIZATION=proxyCred99",
        ("proxyCred99",),
        "HTTPS_PROXY_AUTHORIZATION",
    ),
    Shape(
        "tokenizer secret variable",
        "HF_TOKENIZER_SECRET=tokSecret77",
        ("tokSecret77",),
        "HF_TOKENIZER_SECRET",
    ),
    Shape("cookie variable", "SESSION_COOKIE=cookieVal55", ("cookieVal55",), "SESSION_COOKIE"),
    Shape("passphrase variable", "GPG_PASSPHRASE=open sesame now", ("open sesame now",), "GPG_PASSPHRASE"),
    Shape("pwd variable", "MYSQL_PWD=mysqlPwd33", ("mysqlPwd33",), "MYSQL_PWD"),
    Shape("password variable", "DB_PASSWORD=dbPass11", ("dbPass11",), "DB_PASSWORD"),
    Shape("token variable", "HF_TOKEN=plainTok3n", ("plainTok3n",), "HF_TOKEN"),
    Shape("credentials variable", "GOOGLE_CREDENTIALS=credBlob88", ("credBlob88",), "GOOGLE_CREDENTIALS"),
)

# Text that looks a little like a secret and must come out unchanged: what a diagnosis needs.
LOOKALIKES: tuple[str, ...] = (
    "commit 3f786850e387550fdab836ed7e6dc881de23001b",
    "torch 2.13.0+git1a2b3c4 (a1b2c3d)",
    "run id 123e4567-e89b-12d3-a456-426614174000",
    "RUN_ID=9F1C2B3A-4D5E-6F70-8192-A3B4C5D6E7F8",
    "NCCL INFO comm 0x55d5c8a0 rank 0 nranks 2 cudaDev 0 busId 1000 commId 0x6a3f1c2b9e8d7f01 - Init COMPLETE",
    "ncclUniqueId 0x" + "7f3a9c1b" * 16,
    "NCCL_COMM_ID=10.0.0.1:29500",
    "image sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "TOKENIZERS_PARALLELISM=false",
    "triage: error: /etc/passwd: not Python source",
    "HF_TOKEN: not set, so the download is anonymous",
    "ssh: Authentication: failed for user alice",
    "generate(max_tokens=512) --max-new-tokens 64 num_keys=3",
    "KeyError: 'decoder.layers.0.self_attn.q_proj.weight'",
    "torch.distributed.DistStoreError: wait timeout after 11000ms, keys: /default_pg//0//cpu//0/1",
    "MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 WORLD_SIZE=16",
    "PWD=/home/alice/project OLDPWD=/tmp",
    "see https://github.com/pytorch/pytorch/issues/85604",
    "npm install https://registry.npmjs.org/@types/node",
    "ssh://git@github.com/org/repo.git",
    "AUTHOR=alice author: Bob",
    "KeyboardInterrupt",
    "--tokenizer_name gpt2 --tokenizer-path /data/tokenizer.json",
    "2024-05-01T12:00:00.123Z step 42 loss 1.2345",
    "python train.py --batch-size 32 --lr 3e-4 --epochs 10",
    "mail alice@example.com",
    "listening on [fe80::1]:29500",
    "NCCL_IB_HCA=mlx5_0:1,mlx5_1:1 NCCL_SOCKET_IFNAME=eth0",
    "CUDA_VISIBLE_DEVICES=0,1,2,3",
    "sk-learn is not scikit-learn",
    "git-lfs oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393",
    "model meta-llama/Llama-2-7b-hf",
    "the bearer of bad news",
    "export HF_TOKEN=$HF_TOKEN",
    "one `KEY=value` per line",
)
