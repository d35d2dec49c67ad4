"""The generated practice, pinned byte for byte: a digest per resource type and scale.

The data generator is refactored and its facts move to the catalogue; none of that
may change a single generated value. Each digest covers every record of one
collection (built, serialised canonically with sorted keys, in index order), and
one more covers the search columns and the lookups `$find` and `$book` use. The
inputs are all fixed (seed 0, the :data:`~toolkit.mock.data.ANCHOR` date, the
scale), so nothing here depends on the day the test runs.

When the data is *meant* to change, run this module's ``__main__`` and paste the
new table (``uv run python tests/mock/test_data_pinned.py``), and say why in the
commit; see docs/mock.md, "How the data is generated".
"""

from __future__ import annotations

import hashlib

import orjson
import pytest

from toolkit.mock.data import PracticeData, generate
from toolkit.mock.shapes import SHAPES, Shapes

LOOKUPS = "(lookups)"
"""The key of the digest over search columns, grid and id counters (not a resource type)."""

PINNED: dict[tuple[str, str], dict[str, str]] = {
    ("small", "live"): {
        "Organization": "36f0d94efeb5d9d7c2d1b1c0714055017d319dc619475de9b90d32d1622f7999",
        "Practitioner": "6c7f50c73bed94c99917d91b3e7fd320de89e8cc2247805c46c36720e0d6b2cd",
        "PractitionerRole": "04e0b59e43f5047ff465c5d4c55ef1fcddbe754d06223bff40928ffc40a2a611",
        "HealthcareService": "366cbfbda26c8e16b8079779f9655749f1e344c44fad0203f7d790725e172781",
        "ChargeItemDefinition": "4b8074a2c6ed02fd74d2a8dd848e8e8932045d1cfaef9a83e50de3ffde024d92",
        "Patient": "18db5a071af969f13713fb66368075b4d21e97a900a462b39081956c3fa36a72",
        "Coverage": "958994bbfe43ff61ebf2019e87373198320d00e6877e6c985ee6326dbadb6565",
        "Referral": "5ef2889261d63059785d22f9841740ca4f84dea118cd075d8194dfa3e8626b90",
        "Appointment": "3b5efbd3e5912ecc1f26a04e3b5bf87e0576cc72f98411b7c0504a28d53569b9",
        "Invoice": "4f4a80486d40b97f782b66c6cd7c577f66998063e06244e65c3ca1af109fce54",
        "InvoiceLine": "0b720fa2e03c55de85442b52022e47e9f792c2de25c4701c00dfad2e9ec47f66",
        "Slot": "0dfd4f374c2ba252025b8558ec1ddb2764199ac86c04e310ff5b7b0df1420674",
        "ReferralDefinition": "211b537235a702059bf33f52582842c17d49fde1a6f0d592f4d7f42567a89f0d",
        "(lookups)": "93e508f5df4b9083c8d4dd68f768acd57cd6fb0148c590d46ad3582ba72b6655",
    },
    ("small", "spec"): {
        "Organization": "36f0d94efeb5d9d7c2d1b1c0714055017d319dc619475de9b90d32d1622f7999",
        "Practitioner": "2ce05791d211dfa89a0ce03840932848769232bfbf26f58bda3dfe61b6ad37e5",
        "PractitionerRole": "04e0b59e43f5047ff465c5d4c55ef1fcddbe754d06223bff40928ffc40a2a611",
        "HealthcareService": "366cbfbda26c8e16b8079779f9655749f1e344c44fad0203f7d790725e172781",
        "ChargeItemDefinition": "4b8074a2c6ed02fd74d2a8dd848e8e8932045d1cfaef9a83e50de3ffde024d92",
        "Patient": "f777479e8b1a6fc3f175c3db920f4c547f41a40361e96fd53f99e0727f7cf3ae",
        "Coverage": "e22edb68d58a87aec804b5e1c717a0c160a44c20f1be8183f256cbfd75ae24c1",
        "Referral": "5ef2889261d63059785d22f9841740ca4f84dea118cd075d8194dfa3e8626b90",
        "Appointment": "9e27e9864b6f2bb8493aebd968e33aa3399a34d2605bc7470407d657ac2cf657",
        "Invoice": "4f4a80486d40b97f782b66c6cd7c577f66998063e06244e65c3ca1af109fce54",
        "InvoiceLine": "d9f127457f40517c91df9f82c0062df3923eb20b4db657ddf354ac5950108d3d",
        "Slot": "0dfd4f374c2ba252025b8558ec1ddb2764199ac86c04e310ff5b7b0df1420674",
        "ReferralDefinition": "211b537235a702059bf33f52582842c17d49fde1a6f0d592f4d7f42567a89f0d",
        "(lookups)": "93e508f5df4b9083c8d4dd68f768acd57cd6fb0148c590d46ad3582ba72b6655",
    },
    ("medium", "live"): {
        "Organization": "978d454b64006de3c8d894ca2fa7870328dca101daba93dd770f24330213658b",
        "Practitioner": "52ce5320386ab19fda6d6c363982f3586948f2af6d34abfdce303ce1583630cd",
        "PractitionerRole": "fec891c27e049b1e27c340fc08b27ee86f6d29396cee70ee82de152cebf93cb6",
        "HealthcareService": "e0ac9ec725b0d7b03c1b82d6f2080c5dd8038426c451064ffd0cce8d23d18ce2",
        "ChargeItemDefinition": "3410d1d9ea45c8bc0f256feb4cf93ce49b405f53867e7af125c60274feac2264",
        "Patient": "51d7660bfa75cb3c5082293c8f38c9b36536b349e22eec42b974cdfaa9ce9892",
        "Coverage": "45a0e6774dfa6bbece9c91dad9b6444cb616a255aaf19ffa17b2e2a8e9a46d4c",
        "Referral": "497e6a33b2c4cc52be877df739fa4cabc6e2c88299b210a4bdb45f18e9a4e517",
        "Appointment": "df34008d0006845b3e601aeafe7bb1677cfac40ee857a1127a950cdf6f75090f",
        "Invoice": "0279ccaeb6f62b71eb779c7db253f7c1b5de13ed848bda5c7b88aaaac9e8c4e2",
        "InvoiceLine": "bfcdcb3d094632ec12d92142379af8f0353bb8669a451f42de65a744023412e6",
        "Slot": "c94b4d83772de7512e9e46e6d5c8a6d0ab673c65b4defed680c133577c91b1fa",
        "ReferralDefinition": "211b537235a702059bf33f52582842c17d49fde1a6f0d592f4d7f42567a89f0d",
        "(lookups)": "48109b8cf368ef61f8a3af4d150274695ee297333bfa2dc6608cf56c2962aa78",
    },
    ("medium", "spec"): {
        "Organization": "978d454b64006de3c8d894ca2fa7870328dca101daba93dd770f24330213658b",
        "Practitioner": "5cd72764a9f5c804ee882ca048db8a89e8315652393bc3d2d291ed1a62d9d8c0",
        "PractitionerRole": "fec891c27e049b1e27c340fc08b27ee86f6d29396cee70ee82de152cebf93cb6",
        "HealthcareService": "e0ac9ec725b0d7b03c1b82d6f2080c5dd8038426c451064ffd0cce8d23d18ce2",
        "ChargeItemDefinition": "3410d1d9ea45c8bc0f256feb4cf93ce49b405f53867e7af125c60274feac2264",
        "Patient": "451c6ce68a7ff0184efb80846ac61c721246f070aaf3b61d507bc1fd5709abc0",
        "Coverage": "3e0e2766d81c88962509bd42c853ac1b9403ee385134139142d85c0b70a1385f",
        "Referral": "497e6a33b2c4cc52be877df739fa4cabc6e2c88299b210a4bdb45f18e9a4e517",
        "Appointment": "179e8fcdd7a0f3aacba3457be6a01e124e52222966932fa9d43b4bc07c802ee3",
        "Invoice": "0279ccaeb6f62b71eb779c7db253f7c1b5de13ed848bda5c7b88aaaac9e8c4e2",
        "InvoiceLine": "ba2706eaa13c17abbfdae15d4dfa36be30ee6ca59e3c9acee856865b26314116",
        "Slot": "c94b4d83772de7512e9e46e6d5c8a6d0ab673c65b4defed680c133577c91b1fa",
        "ReferralDefinition": "211b537235a702059bf33f52582842c17d49fde1a6f0d592f4d7f42567a89f0d",
        "(lookups)": "48109b8cf368ef61f8a3af4d150274695ee297333bfa2dc6608cf56c2962aa78",
    },
}


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


if __name__ == "__main__":
    for scale in ("small", "medium"):
        for shape in SHAPES:
            print(f"    ({scale!r}, {shape!r}): {{")
            for name, digest in digests(generate(0, scale, shape)).items():
                print(f"        {name!r}: {digest!r},")
            print("    },")
