"""A test authenticator for local accounts: each account's password is in a file that only root
reads (accounts.json, written by course_hub.py). For a real class use OAuthenticator or
ltiauthenticator instead (see jupyterhub_config.py)."""
import hmac
import json

from jupyterhub.auth import LocalAuthenticator
from traitlets import Unicode


class CourseAuthenticator(LocalAuthenticator):
    accounts_file = Unicode("", help="JSON object: account name -> password").tag(config=True)

    async def authenticate(self, handler, data):
        with open(self.accounts_file) as f:
            accounts = json.load(f)
        name, password = data.get("username", ""), data.get("password", "")
        if name in accounts and hmac.compare_digest(accounts[name].encode(), password.encode()):
            return name
        return None
