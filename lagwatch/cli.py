def main() -> None:
    print("lagwatch")
