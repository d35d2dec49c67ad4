"""The generated practice, pinned byte for byte: a digest per resource type and scale.

The data generator is refactored and its facts move to the catalogue; none of that
may change a single generated value. Each digest covers every record of one
collection (built, serialised canonically with sorted keys, in index order), and
one more covers the search columns and the lookups `$find` and `$book` use. The
inputs are all fixed (seed 0, the :data:`~toolkit.mock.data.ANCHOR` date, the
scale), so nothing here depends on the day the test runs.

When the data is *meant* to change, rewrite the table between its markers
(``uv run python tools/regenerate.py --only pinned-digests``), and say why in the
commit; see docs/mock.md, "How the data is generated".
"""

from __future__ import annotations

import hashlib

import orjson
import pytest

from toolkit.mock.data import PracticeData, generate
from toolkit.mock.shapes import Shapes

LOOKUPS = "(lookups)"
"""The key of the digest over search columns, grid and id counters (not a resource type)."""

# generated: pinned-digests
PINNED: dict[tuple[str, str], dict[str, str]] = {
    ("small", "live"): {
        "Organization": "36f0d94efeb5d9d7c2d1b1c0714055017d319dc619475de9b90d32d1622f7999",
        "Practitioner": "6c7f50c73bed94c99917d91b3e7fd320de89e8cc2247805c46c36720e0d6b2cd",
        "PractitionerRole": "04e0b59e43f5047ff465c5d4c55ef1fcddbe754d06223bff40928ffc40a2a611",
        "HealthcareService": "366cbfbda26c8e16b8079779f9655749f1e344c44fad0203f7d790725e172781",
        "ChargeItemDefinition": "4b8074a2c6ed02fd74d2a8dd848e8e8932045d1cfaef9a83e50de3ffde024d92",
        "Patient": "08580b8f905978d64130c93c90a260f2c20d3137d61e186bcca75641109f4e77",
        "Coverage": "958994bbfe43ff61ebf2019e87373198320d00e6877e6c985ee6326dbadb6565",
        "Referral": "ea79e4670f310ae43c16b5416dc00ad6dabef2d82cc03cfedcf841075ec5c0c4",
        "Appointment": "d3315368400eca22b6143636847944a2d90541b7e63924857f2f1534b48edf24",
        "Invoice": "32f9a08be6dd5426e5ce9d7f7675ec6c861f7c01d127c421ddc6d5bf4b27069d",
        "InvoiceLine": "44304d673a573fb8f78ac732db86cefd66f545a4f0d5b8b0ac274ee82ae4de0f",
        "Slot": "2ac4a8fee8646cca46271eed89a513c49759e6703c4350ae49dc08771b0b7bc2",
        "ReferralDefinition": "211b537235a702059bf33f52582842c17d49fde1a6f0d592f4d7f42567a89f0d",
        "Schedule": "e8d067dd4111f38396b59fea11b024aecab4a145058f144eb700f5ccaf617375",
        "(lookups)": "f6dfcfadf9db66bf5c68f62fbb3f603c3a41f853f9ccb2d3f6009d229fbc7c84",
    },
    ("small", "spec"): {
        "Organization": "36f0d94efeb5d9d7c2d1b1c0714055017d319dc619475de9b90d32d1622f7999",
        "Practitioner": "2ce05791d211dfa89a0ce03840932848769232bfbf26f58bda3dfe61b6ad37e5",
        "PractitionerRole": "04e0b59e43f5047ff465c5d4c55ef1fcddbe754d06223bff40928ffc40a2a611",
        "HealthcareService": "366cbfbda26c8e16b8079779f9655749f1e344c44fad0203f7d790725e172781",
        "ChargeItemDefinition": "4b8074a2c6ed02fd74d2a8dd848e8e8932045d1cfaef9a83e50de3ffde024d92",
        "Patient": "540487b97bef6a1a37752d7c5047e41d5708f2ee76474a66243857fb71846e33",
        "Coverage": "e22edb68d58a87aec804b5e1c717a0c160a44c20f1be8183f256cbfd75ae24c1",
        "Referral": "321ab02dce9e47712ea1a5dd35a5c840c3da4c2936300e21d09b7337bb6b66af",
        "Appointment": "f97dbe0dfb64ab973943de48fc8a55a856fe027b4590fe3632a2fc1cb749051e",
        "Invoice": "32f9a08be6dd5426e5ce9d7f7675ec6c861f7c01d127c421ddc6d5bf4b27069d",
        "InvoiceLine": "2efe9c523f548954dd1907efb78dcb6f8d3b32a0aaf7730bc3072ccc47d7d29b",
        "Slot": "2ac4a8fee8646cca46271eed89a513c49759e6703c4350ae49dc08771b0b7bc2",
        "ReferralDefinition": "211b537235a702059bf33f52582842c17d49fde1a6f0d592f4d7f42567a89f0d",
        "Schedule": "e8d067dd4111f38396b59fea11b024aecab4a145058f144eb700f5ccaf617375",
        "(lookups)": "f6dfcfadf9db66bf5c68f62fbb3f603c3a41f853f9ccb2d3f6009d229fbc7c84",
    },
    ("medium", "live"): {
        "Organization": "978d454b64006de3c8d894ca2fa7870328dca101daba93dd770f24330213658b",
        "Practitioner": "52ce5320386ab19fda6d6c363982f3586948f2af6d34abfdce303ce1583630cd",
        "PractitionerRole": "fec891c27e049b1e27c340fc08b27ee86f6d29396cee70ee82de152cebf93cb6",
        "HealthcareService": "e0ac9ec725b0d7b03c1b82d6f2080c5dd8038426c451064ffd0cce8d23d18ce2",
        "ChargeItemDefinition": "3410d1d9ea45c8bc0f256feb4cf93ce49b405f53867e7af125c60274feac2264",
        "Patient": "bd303f2083aa71d1052fba48c4b84eadca5e851b6e01b421acab47f6eeb94153",
        "Coverage": "45a0e6774dfa6bbece9c91dad9b6444cb616a255aaf19ffa17b2e2a8e9a46d4c",
        "Referral": "128dc617a10465917d152640e3dd84155dd6488eef998f9b8943c24e091f5f8b",
        "Appointment": "69c578a7b8b9fafa9451f1032204afa5bf19d815c14b9d303fac8f868cd64605",
        "Invoice": "08b29a569ce09897332dc38d4f0575443877e1a3ae56f3544f31941401411d4a",
        "InvoiceLine": "048ed23e5ffefbb7562623b2f8c46905549fa29d55a42d9e7cd4a46db6686a04",
        "Slot": "d662ed315d8b9307ca3288d33744a0df721b37d98867a42ac3f9413223a520ea",
        "ReferralDefinition": "211b537235a702059bf33f52582842c17d49fde1a6f0d592f4d7f42567a89f0d",
        "Schedule": "30eeba0e4d41924f2472952868eab7c3ca79af8aac776d9ac475dfe896671d31",
        "(lookups)": "c853e539546590859d8e14a50425dcd64a911fdee06ca9486bd6877b3b4daa8c",
    },
    ("medium", "spec"): {
        "Organization": "978d454b64006de3c8d894ca2fa7870328dca101daba93dd770f24330213658b",
        "Practitioner": "5cd72764a9f5c804ee882ca048db8a89e8315652393bc3d2d291ed1a62d9d8c0",
        "PractitionerRole": "fec891c27e049b1e27c340fc08b27ee86f6d29396cee70ee82de152cebf93cb6",
        "HealthcareService": "e0ac9ec725b0d7b03c1b82d6f2080c5dd8038426c451064ffd0cce8d23d18ce2",
        "ChargeItemDefinition": "3410d1d9ea45c8bc0f256feb4cf93ce49b405f53867e7af125c60274feac2264",
        "Patient": "ea616d44da660ea5463669f613e573a0d5dd6784fc3b96910336a0c989a69938",
        "Coverage": "3e0e2766d81c88962509bd42c853ac1b9403ee385134139142d85c0b70a1385f",
        "Referral": "46e86d969b561dcf6ad70a110b7794c5306f46d2a4ba6f11c14db2198948fc4e",
        "Appointment": "4275c196210584da2d320a9bdb3edff92b02aaab6865368d0e5c6f0881cba813",
        "Invoice": "08b29a569ce09897332dc38d4f0575443877e1a3ae56f3544f31941401411d4a",
        "InvoiceLine": "5565a944789ee7ee1075ef3bbbae32e0ca81278a51b96d74fc40751f050cbb59",
        "Slot": "d662ed315d8b9307ca3288d33744a0df721b37d98867a42ac3f9413223a520ea",
        "ReferralDefinition": "211b537235a702059bf33f52582842c17d49fde1a6f0d592f4d7f42567a89f0d",
        "Schedule": "30eeba0e4d41924f2472952868eab7c3ca79af8aac776d9ac475dfe896671d31",
        "(lookups)": "c853e539546590859d8e14a50425dcd64a911fdee06ca9486bd6877b3b4daa8c",
    },
}
# end generated: pinned-digests


def digests(data: PracticeData) -> dict[str, str]:
    """sha256 of every collection's records (canonical JSON) plus one of the lookups."""
    out: dict[str, str] = {}
    columns = hashlib.sha256()
    for name, coll in data.store.collections.items():
        h = hashlib.sha256()
        for i in range(len(coll)):
            h.update(orjson.dumps(coll.record(i), option=orjson.OPT_SORT_KEYS))
            h.update(b"\n")
        out[name] = h.hexdigest()
        columns.update(orjson.dumps([name, coll.ids, coll.updated, coll.date, coll.owner]))
    columns.update(
        orjson.dumps(
            {
                "seed": data.seed,
                "roles": data.roles,
                "role_clinic": data.role_clinic,
                "role_service": data.role_service,
                "next_ids": data.next_ids,
                "taken": sorted((r, u, n) for (r, u), n in data.grid.taken.items()),
            },
            option=orjson.OPT_SORT_KEYS,
        )
    )
    out[LOOKUPS] = columns.hexdigest()
    return out


@pytest.mark.parametrize(("scale", "shapes"), sorted(PINNED))
def test_generated_data_matches_its_pinned_digests(scale: str, shapes: Shapes) -> None:
    assert digests(generate(0, scale, shapes)) == PINNED[(scale, shapes)]
