"""What a taxonomy version cannot do on the real platforms, for ``run --check`` to say. Pure.

A version stays loadable and behaves as it documented (v1 is kept byte-identical for the
configurations that pin it), but some of its rules cannot work against what a platform really
sends. Each gap is found from the version's data, never from its name, so a copy of v1 under
another name is warned about too, and a version that no longer has the gap is not.
"""

from __future__ import annotations

from supervisor.taxonomy.rules import Taxonomy

#: the response every Genesys attribute update reads first (supervisor/attributes/platform.py)
GENESYS_CONVERSATION = "genesys.rest.Conversation"
#: fields of that read Genesys never sends: PureCloudPlatformClientV2 269, ``Conversation.state``:
#: "When reading conversations, this field will never have a value present."
GENESYS_CONVERSATION_NEVER_SENT = ("state",)


def gaps(taxonomy: Taxonomy) -> list[str]:
    """What ``taxonomy`` cannot do, one phrase each (empty when nothing is known)."""
    out: list[str] = []
    conversation = taxonomy.responses.get(GENESYS_CONVERSATION)
    if conversation is not None:
        never = [f for f in conversation.required if f in GENESYS_CONVERSATION_NEVER_SENT]
        if never:
            fields = ", ".join(f"'{f}'" for f in never)
            out.append(
                f"cannot update Genesys attributes: it requires {fields} on a conversation read, which "
                "Genesys never sends, so every update fails INCOMPLETE_RESPONSE before it is sent"
            )
    return out
