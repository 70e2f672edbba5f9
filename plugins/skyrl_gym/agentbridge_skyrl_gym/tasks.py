"""SkyRL dataset rows as agentbridge tasks.

A SkyRL dataset row (``data_source``, ``prompt`` as chat messages, ``env_class``, ``reward_spec``, ``extra_info``,
plus any env-specific column such as text2sql's ``db_id``) travels whole in ``task.data["skyrl"]``; the env gives
the row to SkyRL-gym as SkyRL's generator does. Three sources:

- ``skyrl/rows``: a SkyRL dataset file (parquet, as SkyRL's example scripts write them, or JSON lines);
- ``skyrl/arithmetic``: offline GSM8K-format questions (SkyRL's gsm8k prompt and ``####`` answers) for the
  ``gsm8k`` and ``gsm8k_multi_turn`` envs;
- ``skyrl/sql``: offline text2sql tasks on small generated SQLite databases in Spider's layout, a disjoint set of
  databases per split (Spider's own split is by database); the env writes a database where it is missing.
"""

from __future__ import annotations

import json
import random
import sqlite3
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

from agentbridge import Task, capacity_line, declares_capacity, seed_block_capacity

SPLIT_BASE = {"train": 0, "dev": 1_000_000, "eval": 2_000_000, "test": 2_000_000}
SPLIT_SEEDS = 1_000_000  # seeds each split owns, from its base
GSM8K_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'  # SkyRL's gsm8k_dataset.py
ARITHMETIC_SOURCE = "agentbridge/arithmetic"
SQL_SOURCE = "agentbridge/sql"


def _plain(value: Any) -> Any:
    """A parquet cell as plain Python (numpy arrays and scalars inside lists and dicts too)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return _plain(tolist())
    return value


def read_rows(path: str) -> list[dict[str, Any]]:
    """The rows of a SkyRL dataset file: ``.parquet`` (pandas) or JSON lines (``.jsonl``/``.json``)."""
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"skyrl/rows: no dataset file {path}")
    if file.suffix == ".parquet":
        import pandas as pd

        return [_plain(r) for r in pd.read_parquet(file).to_dict(orient="records")]
    return [json.loads(line) for line in file.read_text().splitlines() if line.strip()]


def _split(split: str) -> int:
    if split not in SPLIT_BASE:
        raise ValueError(f"split must be train, dev or eval, got {split!r}")
    return SPLIT_BASE[split]


def _user_text(row: dict[str, Any]) -> str:
    users = [m.get("content") or "" for m in row.get("prompt") or [] if m.get("role") == "user"]
    return str(users[-1]) if users else ""


def row_task(task_id: str, row: dict[str, Any], group: str | None = None, seed: int | None = None) -> Task:
    """A task carrying ``row`` (its prompt text is the row's last user message; ``seed``: the generator's)."""
    data: dict[str, Any] = {"skyrl": row} if seed is None else {"skyrl": row, "seed": seed}
    data["group"] = group or str(row.get("env_class") or row.get("data_source") or "skyrl")
    return Task(id=task_id, prompt=_user_text(row), data=data)


def rows_capacity(split: str = "train", seed: int = 0, path: str = "", shuffle: bool = False) -> int:
    """The rows in the file."""
    _split(split)
    return len(read_rows(path))


@declares_capacity(rows_capacity)
def dataset_rows(split: str = "train", size: int = 100, seed: int = 0, path: str = "",
                 shuffle: bool = False) -> list[Task]:
    """The first ``size`` rows of the SkyRL dataset file ``path`` (shuffled with ``seed`` first when ``shuffle``).
    The file is the split: give each split its own file, as SkyRL does (``train.parquet``,
    ``validation.parquet``)."""
    _split(split)
    rows = read_rows(path)
    if size > len(rows):
        raise ValueError(capacity_line("skyrl/rows", len(rows), split, size, f"path={path}"))
    order = list(range(len(rows)))
    if shuffle:
        random.Random(seed).shuffle(order)
    return [row_task(f"skyrl-{split}-{i}", rows[i]) for i in order[:size]]


def _seed_capacity(split: str = "train", seed: int = 0, **_: Any) -> int:
    _split(split)
    return seed_block_capacity(seed, SPLIT_SEEDS)


def _seeds(name: str, split: str, size: int, seed: int) -> list[int]:
    capacity = _seed_capacity(split, seed)
    if size > capacity:
        raise ValueError(capacity_line(name, capacity, split, size, f"seed={seed}"))
    first = SPLIT_BASE[split] + seed * size
    return list(range(first, first + size))


_ITEMS = ["apples", "pencils", "books", "marbles", "cookies", "stamps"]
_PEOPLE = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana"]


def arithmetic_question(s: int) -> tuple[str, int]:
    """A two-step word problem and its answer, from seed ``s``."""
    rng = random.Random(s)
    who, item = rng.choice(_PEOPLE), rng.choice(_ITEMS)
    a, b, c = rng.randint(2, 9), rng.randint(2, 12), rng.randint(1, 9)
    kind = rng.randrange(3)
    if kind == 0:
        return f"{who} has {a} boxes with {b} {item} in each box and gives away {c} {item}. How many {item} are " \
               f"left?", a * b - c
    if kind == 1:
        return f"{who} buys {a} bags of {b} {item} and then finds {c} more {item}. How many {item} does {who} " \
               f"have?", a * b + c
    return f"{who} has {a * b + c} {item} and shares {a * b} of them equally among {a} friends. How many {item} " \
           f"does each friend get, plus the {c} kept?", b + c


@declares_capacity(_seed_capacity)
def arithmetic_tasks(split: str = "train", size: int = 100, seed: int = 0, env_class: str = "gsm8k",
                     max_turns: int | None = None) -> list[Task]:
    """GSM8K-format rows for ``env_class`` (``gsm8k`` or ``gsm8k_multi_turn``): SkyRL's gsm8k prompt, the answer
    as ``reward_spec.ground_truth``; one question per seed, seeds disjoint across splits."""
    tasks = []
    for s in _seeds("skyrl/arithmetic", split, size, seed):
        question, answer = arithmetic_question(s)
        row: dict[str, Any] = {
            "data_source": ARITHMETIC_SOURCE,
            "prompt": [{"role": "user", "content": f"{question} {GSM8K_INSTRUCTION}"}],
            "env_class": env_class,
            "reward_spec": {"method": "rule", "ground_truth": str(answer)},
            "extra_info": {"split": split, "index": s, "question": question},
        }
        if max_turns is not None:
            row["extra_info"]["max_turns"] = max_turns
        tasks.append(row_task(f"skyrl-arith-{split}-{s}", row, seed=s))
    return tasks


# --- text2sql on generated databases (Spider's layout: <db_path>/spider/database/<db_id>/<db_id>.sqlite) ---

SQL_SCHEMA = ("CREATE TABLE customers (id INTEGER, name TEXT, city TEXT, age INTEGER);\n"
              "CREATE TABLE orders (id INTEGER, customer_id INTEGER, product TEXT, amount INTEGER);")
SQL_SYSTEM = ("Answer the question about a SQLite database with one SQL query. Schema:\n" + SQL_SCHEMA + "\n"
              "Each turn, think inside <think>...</think>, then either run a query inside <sql>...</sql> to see its "
              "result, or give your final query inside <solution>...</solution>.")
_CITIES = ["Lima", "Oslo", "Pune", "Kyiv", "Rome", "Nara"]
_NAMES = ["Ada", "Bo", "Cy", "Di", "Ed", "Flo", "Gia", "Hal", "Ivy", "Jo", "Kai", "Lu"]
_PRODUCTS = ["pen", "lamp", "desk", "mug", "book"]
SPLIT_DB_BASE = {"train": 0, "dev": 10_000, "eval": 20_000, "test": 20_000}  # databases never shared by splits
_WRITING = threading.Lock()
_WRITTEN: set[Path] = set()  # database files this process has seen on disk


@lru_cache(maxsize=1024)
def database_rows(index: int) -> tuple[list[tuple[int, str, str, int]], list[tuple[int, int, str, int]]]:
    """The customers and orders of generated database ``index`` (deterministic)."""
    rng = random.Random(f"skyrl-sql-{index}")
    names = rng.sample(_NAMES, 8)
    customers = [(i + 1, name, rng.choice(_CITIES), rng.randint(18, 80)) for i, name in enumerate(names)]
    orders = [(j + 1, rng.randint(1, len(customers)), rng.choice(_PRODUCTS), rng.randint(1, 50)) for j in range(16)]
    return customers, orders


def database_file(db_path: str, db_id: str) -> Path:
    return Path(db_path) / "spider" / "database" / db_id / f"{db_id}.sqlite"


def ensure_database(db_path: str, db_id: str) -> Path:
    """Write generated database ``db_id`` (``shop_<index>``) under ``db_path`` unless it is there."""
    file = database_file(db_path, db_id)
    if file in _WRITTEN or file.is_file():
        _WRITTEN.add(file)
        return file
    customers, orders = database_rows(int(db_id.removeprefix("shop_")))
    with _WRITING:
        if file.is_file():
            return file
        file.parent.mkdir(parents=True, exist_ok=True)
        tmp = file.with_suffix(f".tmp{threading.get_ident()}")
        with sqlite3.connect(tmp) as conn:
            conn.executescript(SQL_SCHEMA)
            conn.executemany("INSERT INTO customers VALUES (?, ?, ?, ?)", customers)
            conn.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)", orders)
        conn.close()
        tmp.replace(file)
        _WRITTEN.add(file)
    return file


def sql_question(s: int, db_index: int) -> tuple[str, str]:
    """A question about database ``db_index`` and its gold SQL, from seed ``s``."""
    rng = random.Random(s)
    customers, orders = database_rows(db_index)
    kind = rng.randrange(4)
    if kind == 0:
        city = rng.choice(customers)[2]
        return f"How many customers live in {city}?", f"SELECT COUNT(*) FROM customers WHERE city = '{city}'"
    if kind == 1:
        name = rng.choice(customers)[1]
        return f"Which city does {name} live in?", f"SELECT city FROM customers WHERE name = '{name}'"
    if kind == 2:
        product = rng.choice(orders)[2]
        return f"How many orders of {product} are there?", f"SELECT COUNT(*) FROM orders WHERE product = '{product}'"
    name = rng.choice(customers)[1]
    return (f"What is the total amount of the orders of {name}?",
            f"SELECT SUM(amount) FROM orders WHERE customer_id = (SELECT id FROM customers WHERE name = '{name}')")


@declares_capacity(_seed_capacity)
def sql_tasks(split: str = "train", size: int = 100, seed: int = 0, databases: int = 8) -> list[Task]:
    """text2sql rows (``db_id``, ``data: spider``, the gold SQL as ``reward_spec.ground_truth``) on ``databases``
    generated databases of the split's own. Building the rows writes nothing: the env writes a row's database
    under its ``env_config.db_path`` when it is missing there."""
    tasks = []
    for s in _seeds("skyrl/sql", split, size, seed):
        db_index = SPLIT_DB_BASE[split] + random.Random(-s - 1).randrange(databases)
        db_id = f"shop_{db_index}"
        question, gold = sql_question(s, db_index)
        row = {
            "data_source": SQL_SOURCE,
            "prompt": [{"role": "system", "content": SQL_SYSTEM}, {"role": "user", "content": question}],
            "env_class": "text2sql",
            "db_id": db_id,
            "data": "spider",
            "reward_spec": {"method": "rule", "ground_truth": gold},
            "extra_info": {"split": split, "index": s, "question": question},
        }
        tasks.append(row_task(f"skyrl-sql-{split}-{s}", row, group="text2sql", seed=s))
    return tasks
