def test_extension_imports():
    import tensorplay._C as C
    assert C.__name__ == "tensorplay._C"
