"""The optional digest credential and the ACLs it puts on a group's znodes."""

from __future__ import annotations

from dataclasses import dataclass

from kazoo.security import ACL, make_acl, make_digest_acl

from tenure.errors import ConfigError

__all__ = ["DigestCredential"]


@dataclass(frozen=True)
class DigestCredential:
    """The service's ZooKeeper digest credential: with it, only this user may create, change or delete
    the group's znodes. ``world_readable`` (default True) lets anyone read them (``tenure status``).

    The kazoo client must authenticate with the same credential, from its first connection::

        cred = DigestCredential("tenure", "s3cret")
        client = KazooClient(hosts=..., auth_data=cred.auth_data())
        Election(client, group="orders", identity=identity, credential=cred)

    Hazard: znodes created without a credential keep their open ACL; ACLs are set at creation only.
    """

    user: str
    password: str
    world_readable: bool = True

    def __post_init__(self) -> None:
        if not self.user or ":" in self.user:
            raise ConfigError(f"DigestCredential.user={self.user!r} is invalid: use a non-empty name without ':'")
        if not self.password:
            raise ConfigError("DigestCredential.password='' is empty: digest ACLs need a password; set one")

    @classmethod
    def parse(cls, text: str) -> DigestCredential:
        """The credential written ``user:password`` (``--zk-auth``, ``TENURE_ZK_AUTH``), parsed in one place.

        Raises:
            ConfigError: no ``:``, an empty user or password (the message never shows the password).
        """
        user, colon, password = text.partition(":")
        if not colon:
            raise ConfigError("must be user:password")
        return cls(user, password)

    def auth_data(self) -> list[tuple[str, str]]:
        """The ``auth_data`` argument for ``KazooClient`` (digest scheme, ``user:password``)."""
        return [("digest", f"{self.user}:{self.password}")]

    def acls(self) -> list[ACL]:
        """All permissions for this user, plus read for anyone when ``world_readable``."""
        acl = [make_digest_acl(self.user, self.password, all=True)]
        if self.world_readable:
            acl.append(make_acl("world", "anyone", read=True))
        return acl

    def __repr__(self) -> str:  # never print the password
        return f"DigestCredential(user={self.user!r}, password='***', world_readable={self.world_readable})"
