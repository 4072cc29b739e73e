from ayci.worker import main

main("notifier")
