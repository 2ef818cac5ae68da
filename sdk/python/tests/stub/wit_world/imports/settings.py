"""The operator's `[settings]` table: a test sets `table` (key -> the host's string), and
`json_table` when it wants `get-json` to answer something else than `table` as JSON."""
import json

table = {}
json_table = None


def get(key):
    return table.get(key)


def get_all():
    return sorted(table.items())


def get_json():
    return json.dumps(table if json_table is None else json_table)
