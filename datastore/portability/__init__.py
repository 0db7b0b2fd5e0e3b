"""Export and import (a JSONL dump) and migrate (store to store), every table."""
