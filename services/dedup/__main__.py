from ayci.worker import main

main("dedup")
