# Pydantic models as an application would write them (nested, optional,
# bounded, recursive): `schema` prints their JSON schema, `check FILE`
# validates each reply in FILE (a JSON list of strings) with pydantic itself.
# Works with pydantic 1 (Debian bookworm's python3-pydantic) and 2.
import json
import sys
from typing import List, Literal, Optional

import pydantic
from pydantic import BaseModel, Field

V1 = pydantic.VERSION.startswith("1.")


def bounded_list(lo, hi):
    return Field(min_items=lo, max_items=hi) if V1 else Field(min_length=lo, max_length=hi)


class Address(BaseModel):
    street: str = Field(max_length=12)
    zip: str = Field(min_length=3, max_length=5)


class Node(BaseModel):
    v: int = Field(ge=0, le=9)
    next: Optional["Node"] = None


class Person(BaseModel):
    name: str = Field(min_length=1, max_length=10)
    age: int = Field(ge=0, le=130)
    score: float = Field(ge=0, le=1)
    nickname: Optional[str] = Field(default=None, max_length=6)
    tags: List[Literal["a", "b", "c"]] = bounded_list(1, 3)
    address: Address
    previous: List[Address] = bounded_list(0, 2)
    if not V1:
        # pydantic 1 writes an Optional model without its null: a recursion
        # every document would have to follow forever
        chain: Optional[Node] = None


if V1:
    Node.update_forward_refs()

if sys.argv[1] == "schema":
    print(json.dumps(Person.schema() if V1 else Person.model_json_schema()))
else:
    for text in json.load(open(sys.argv[2])):
        (Person.parse_raw if V1 else Person.model_validate_json)(text)
    print("pydantic ok: every reply validates")
