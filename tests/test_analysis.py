"""kbflow's own lexical analysis: what BM25 indexes and what the query is turned into."""

from __future__ import annotations

from kbflow.core.analysis import LexicalConfig, analyze, split_identifier


def tokens(text: str, **kw) -> list[str]:
    return analyze(text, **kw).split()


def test_camel_case_is_indexed_whole_and_as_stemmed_parts():
    assert tokens("KubePodCrashLooping") == ["kubepodcrashlooping", "kube", "pod", "crash", "loop"]
    assert tokens("OOMKilled") == ["oomkilled", "oom", "kill"]
    # the query "pod crash looping" meets the alert name through its parts
    assert set(tokens("pod crash looping")) <= set(tokens("KubePodCrashLooping fired"))


def test_snake_kebab_and_dotted_keys_split_and_whole():
    assert tokens("max_connections") == ["maxconnections", "max", "connect"]
    assert tokens("kube-proxy") == ["kubeproxy", "kube", "proxi"]
    assert tokens("net.ipv4.tcp_tw_reuse")[0] == "netipv4tcptwreuse"
    assert {"tcp", "reus"} <= set(tokens("net.ipv4.tcp_tw_reuse"))
    # the exact identifier in a query matches the whole form, which plain words never produce
    assert "maxconnections" in tokens("raise max_connections") and "maxconnections" not in tokens(
        "max connections"
    )


def test_splitting_can_be_turned_off():
    assert tokens("KubePodCrashLooping", split_ids=False) == ["kubepodcrashloop"]
    assert split_identifier("HikariCP") == ["hikari", "cp"]


def test_stemming_and_stop_words():
    assert tokens("The connections are exhausted and queries were timing out") == [
        "connect",
        "exhaust",
        "queri",
        "time",
    ]
    assert tokens("what is it") == []  # only stop words: nothing for BM25 to match


def test_numbers_and_error_codes_survive():
    assert tokens("ERROR 1213 (40001): Deadlock found") == ["error", "1213", "40001", "deadlock", "found"]
    assert "137" in tokens("exit code 137")


def test_lowercase_mode_hands_chinese_text_to_milvus_jieba():
    zh = LexicalConfig("lowercase", fields=False)
    assert zh.index_text("标题", "数据库 > 连接池", "数据库连接池满了") == "数据库连接池满了"
    assert zh.query_text("连接池满了怎么办") == "连接池满了怎么办"
    assert zh.tokenizer("jieba") == "jieba" and LexicalConfig().tokenizer("jieba") == "standard"


def test_chinese_runs_are_cut_in_search_mode_without_stop_words():
    # search mode: the word and its dictionary sub-words, so 连接 meets 连接池
    assert {"连接", "连接池", "数据库"} <= set(tokens("数据库连接池满了怎么办"))
    # question and function words say nothing about the topic
    assert not {"怎么办", "为什么", "的", "了", "吗"} & set(tokens("为什么连接池满了的时候会报错吗"))
    assert "报错" in tokens("为什么连接池满了的时候会报错吗")


def test_identifiers_inside_chinese_text_are_english_terms():
    assert tokens("Routine Load 一直 PAUSED 怎么办") == ["routin", "load", "paus"]
    text = tokens("修改 fe.conf 里的 max_compaction_score 后 ERROR 1064 消失")
    assert {"feconf", "fe", "conf", "maxcompactionscore", "compact", "error", "1064"} <= set(text)
    assert {"修改", "消失"} <= set(text)
    assert tokens("Broker Load 导入失败")[:2] == ["broker", "load"]


def test_full_width_forms_fold_to_half_width():
    assert tokens("ＳＱＬ报错ＥＲＲＯＲ　１０６４，请检查") == tokens("SQL报错ERROR 1064,请检查")
    assert "sql" in tokens("ＳＱＬ报错") and "1064" in tokens("错误码１０６４")


def test_every_token_is_letters_and_digits_so_milvus_standard_keeps_it_whole():
    text = "Kafka 消费者组 lag 持续增长（records-lag-max），怎么处理？kube-proxy 报错 net.ipv4.tcp_tw_reuse"
    assert all(t.isalnum() for t in tokens(text))


def test_fields_add_breadcrumb_and_title_once():
    cfg = LexicalConfig("stem+ids", fields=True)
    text = "Redis memory full > Symptoms\n\nkeys are evicted"
    # the chunk text starts with the title (its heading path): the title is not counted twice
    assert cfg.index_text("Redis memory full", "Cache > Redis", text).split().count("redi") == 2
    assert "cach" in cfg.index_text("Redis memory full", "Cache > Redis", text).split()
    # a title the text does not start with takes part
    assert "eviction" not in cfg.index_text("Eviction runbook", "", "keys vanish").split()
    assert "evict" in cfg.index_text("Eviction runbook", "", "keys vanish").split()
    assert LexicalConfig("stem+ids", fields=False).index_text("Eviction", "Cache", "keys") == "key"


def test_version_round_trips_and_changes_with_the_analysis():
    for cfg in (LexicalConfig(), LexicalConfig("stem", False), LexicalConfig("lowercase", True)):
        assert LexicalConfig.parse(cfg.version) == cfg
    assert len({LexicalConfig(m, f).version for m in ("stem+ids", "stem") for f in (True, False)}) == 4
    assert LexicalConfig().version.endswith("/3")  # Chinese cut by kbflow: older scopes are re-analysed
    assert LexicalConfig.parse(None) is None  # a scope built before kbflow analysed text
