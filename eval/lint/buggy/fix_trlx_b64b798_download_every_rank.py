# source: https://github.com/CarperAI/trlx/commit/b64b798b69ad619d39705586420319c989d30211
# established by the merged fix (PR #406, "Add some synchronization to the db download in the simulacra
#   example"): every process of the launched example ran `if not os.path.exists(dbpath):
#   urlretrieve(url, dbpath)`, so all ranks downloaded into the same file at once; the fix downloads on
#   local rank 0 only and makes the others wait.
# expect: TRG023
# (the real file before the fix, unmodified below this header: CarperAI/trlx examples/simulacra.py at c9ab683; licence: MIT (c) CarperAI)
# Optimize prompts by training on prompts-ratings pairings dataset
# taken from https://github.com/JD-P/simulacra-aesthetic-captions

import os
import sqlite3
from urllib.request import urlretrieve

import trlx
from trlx.data.default_configs import default_ilql_config

url = "https://raw.githubusercontent.com/JD-P/simulacra-aesthetic-captions/main/sac_public_2022_06_29.sqlite"
dbpath = "sac_public_2022_06_29.sqlite"

if __name__ == "__main__":
    if not os.path.exists(dbpath):
        print(f"fetching {dbpath}")
        urlretrieve(url, dbpath)

    conn = sqlite3.connect(dbpath)
    c = conn.cursor()
    c.execute(
        "SELECT prompt, rating FROM ratings "
        "JOIN images ON images.id=ratings.iid "
        "JOIN generations ON images.gid=generations.id "
        "WHERE rating IS NOT NULL;"
    )

    prompts, ratings = tuple(map(list, zip(*c.fetchall())))
    trlx.train(
        config=default_ilql_config(),
        samples=prompts,
        rewards=ratings,
        eval_prompts=["Hatsune Miku, Red Dress"] * 64,
    )
